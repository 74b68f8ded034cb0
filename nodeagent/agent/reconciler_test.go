package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
)

// TestReconcileCachesLabelsAndReports drives the reconciler against a fake API: a Model served over
// HTTP becomes a warm entry, the node gets the warm label, the Model's status gets a Ready entry for the
// node, a pod using the model pins it, and deleting the Model and evicting the entry removes the label.
func TestReconcileCachesLabelsAndReports(t *testing.T) {
	data := make([]byte, 2<<20)
	rand.Read(data)
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()

	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	v1alpha1.AddToScheme(scheme)
	model := &v1alpha1.Model{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llama"},
		Spec:       v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: srv.URL + "/m"}, Digest: "sha256:" + h, SizeBytes: int64(len(data))},
	}
	other := &v1alpha1.Model{ // a digest this node cannot fetch: its status says Failed
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "broken"},
		Spec:       v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: srv.URL + "/m"}, Digest: "sha256:" + hexN(9)},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"keep": "me"}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent-0", Annotations: map[string]string{PodModelAnnotation: "llama"}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(model, other, node, pod).
		WithStatusSubresource(&v1alpha1.Model{}).Build()

	st, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &Reconciler{Client: c, APIReader: c, Agent: New(ctx, Config{Store: st, Sources: testSources}), NodeName: "n1"}
	label := v1alpha1.WarmNodeLabel(model.Spec.Digest)

	reconcileUntil(t, r, "node labelled and status Ready", func() bool {
		var n corev1.Node
		var m v1alpha1.Model
		c.Get(ctx, types.NamespacedName{Name: "n1"}, &n)
		c.Get(ctx, client.ObjectKeyFromObject(model), &m)
		return n.Labels[label] == "true" && len(m.Status.Nodes) == 1 && m.Status.Nodes[0].Phase == v1alpha1.ModelCacheReady
	})
	var n corev1.Node
	c.Get(ctx, types.NamespacedName{Name: "n1"}, &n)
	if n.Labels["keep"] != "me" {
		t.Fatalf("unrelated label lost: %v", n.Labels)
	}
	if !st.Pinned(h) {
		t.Fatal("entry used by a running pod is not pinned")
	}
	reconcileUntil(t, r, "broken model reported Failed", func() bool {
		var m v1alpha1.Model
		c.Get(ctx, client.ObjectKeyFromObject(other), &m)
		return len(m.Status.Nodes) == 1 && m.Status.Nodes[0].Phase == v1alpha1.ModelCacheFailed && m.Status.Nodes[0].NodeName == "n1"
	})
	if _, err := st.Evict(0); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Peek(h); !ok {
		t.Fatal("Evict removed an entry pinned by a running pod")
	}

	// The pod ends and the Model goes away; once evicted, the label must go too.
	c.Delete(ctx, pod)
	c.Delete(ctx, model)
	c.Delete(ctx, other)
	reconcileUntil(t, r, "pins dropped", func() bool { return !st.Pinned(h) })
	if err := st.Remove(h); err != nil {
		t.Fatal(err)
	}
	reconcileUntil(t, r, "label removed after eviction", func() bool {
		var n corev1.Node
		c.Get(ctx, types.NamespacedName{Name: "n1"}, &n)
		_, has := n.Labels[label]
		return !has && n.Labels["keep"] == "me"
	})
}

func reconcileUntil(t *testing.T, r *Reconciler, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if _, err := r.Reconcile(context.Background(), reconcile.Request{}); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReconcileRetriesAtOnceWhenSourceChanges checks the retry delay after a
// failed fetch: the same source waits RetryAfter, a Model updated to another
// source is fetched at the next reconcile.
func TestReconcileRetriesAtOnceWhenSourceChanges(t *testing.T) {
	data := make([]byte, 1<<20)
	rand.Read(data)
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/good" {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	tests := []struct {
		name      string
		secondURI string
		wantReady bool
	}{
		{name: "same failing source waits for the retry delay", secondURI: srv.URL + "/missing", wantReady: false},
		{name: "new source is fetched at once", secondURI: srv.URL + "/good", wantReady: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			clientgoscheme.AddToScheme(scheme)
			v1alpha1.AddToScheme(scheme)
			model := &v1alpha1.Model{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
				Spec:       v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: srv.URL + "/missing"}, Digest: digest},
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(model, node).WithStatusSubresource(&v1alpha1.Model{}).Build()
			st, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := &Reconciler{Client: c, APIReader: c, Agent: New(ctx, Config{Store: st, Sources: testSources}), NodeName: "n1", FirstRetry: time.Hour, RetryAfter: time.Hour}
			h := hex.EncodeToString(sum[:])
			reconcileUntil(t, r, "first fetch failed", func() bool { return r.Agent.State(h).Phase == PhaseFailed })

			var m v1alpha1.Model
			if err := c.Get(ctx, client.ObjectKeyFromObject(model), &m); err != nil {
				t.Fatal(err)
			}
			m.Spec.Source.URI = tc.secondURI
			if err := c.Update(ctx, &m); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && r.Agent.State(h).Phase != PhaseReady {
				if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
					t.Fatalf("Reconcile: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got := r.Agent.State(h).Phase == PhaseReady; got != tc.wantReady {
				t.Errorf("ready after the source change = %v, want %v (state %+v)", got, tc.wantReady, r.Agent.State(h))
			}
		})
	}
}

func TestRetryDelayBacksOff(t *testing.T) {
	tests := []struct {
		name     string
		first    time.Duration
		limit    time.Duration
		failures int
		want     time.Duration
	}{
		{name: "defaults, first failure", failures: 1, want: 2 * time.Second},
		{name: "defaults, doubles", failures: 3, want: 8 * time.Second},
		{name: "defaults, capped at a minute", failures: 10, want: time.Minute},
		{name: "zero failures uses the first delay", failures: 0, want: 2 * time.Second},
		{name: "custom", first: time.Second, limit: 5 * time.Second, failures: 4, want: 5 * time.Second},
		{name: "first above the cap", first: time.Hour, limit: time.Minute, failures: 1, want: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{FirstRetry: tc.first, RetryAfter: tc.limit}
			if got := r.retryDelay(tc.failures); got != tc.want {
				t.Errorf("retryDelay(%d) = %s, want %s", tc.failures, got, tc.want)
			}
		})
	}
}
