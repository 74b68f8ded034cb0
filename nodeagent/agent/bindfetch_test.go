package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
)

func blob(t *testing.T, n int) ([]byte, string) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	s := sha256.Sum256(b)
	return b, hex.EncodeToString(s[:])
}

// TestReconcileBindStartsFetch: the only fetch slot is held by the prewarm of another Model and the
// pod's Model waits behind it; a pod bound to the node that uses the Model moves its fetch ahead
// (no second download), the entry is pinned while it is fetched, the pod gets WeightsFetchStarted then
// WeightsReady, the ready link appears, and later reconciles record nothing more.
func TestReconcileBindStartsFetch(t *testing.T) {
	held, heldHex := blob(t, 1<<20)
	data, h := blob(t, 1<<20)
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			entered <- struct{}{}
			<-release
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(held))
			return
		}
		hits.Add(1)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	defer close(release)

	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	v1alpha1.AddToScheme(scheme)
	prewarm := &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a-prewarm"},
		Spec: v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: srv.URL + "/held"}, Digest: "sha256:" + heldHex}}
	model := &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llama"},
		Spec: v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: srv.URL + "/m"}, Digest: "sha256:" + h, Format: "gguf"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(prewarm, node).
		WithStatusSubresource(&v1alpha1.Model{}).Build()
	st, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := record.NewFakeRecorder(10)
	r := &Reconciler{Client: c, APIReader: c, Agent: New(ctx, Config{Store: st, Sources: testSources}), NodeName: "n1", Recorder: rec}

	// Prewarm only: the held Model takes the slot, then the pod's Model queues behind it.
	reconcileUntil(t, r, "the held prewarm downloading", func() bool {
		select {
		case <-entered:
			return true
		default:
			return false
		}
	})
	if err := c.Create(ctx, model); err != nil {
		t.Fatal(err)
	}
	reconcileUntil(t, r, "the Model's fetch queued behind prewarm", func() bool { return st.Queued(h) })
	time.Sleep(200 * time.Millisecond)
	if st.Queued(h) == false || hits.Load() != 0 {
		t.Fatalf("queued=%v hits=%d: the Model was fetched without a pod", st.Queued(h), hits.Load())
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent-0", UID: "u1", Annotations: map[string]string{PodModelAnnotation: "llama"}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	if !st.Pinned(h) || st.Queued(h) {
		t.Fatalf("right after the bind: pinned %v, still queued behind prewarm %v; want pinned and started", st.Pinned(h), st.Queued(h))
	}
	defer func() { // stop the agent's fetches before the temporary directory goes
		cancel()
		for deadline := time.Now().Add(5 * time.Second); r.Agent.Running() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	reconcileUntil(t, r, "the bound pod's weights ready and linked", func() bool { return st.Exposed(h, "model.gguf") })
	if p := r.Agent.State(h).Phase; p != PhaseReady {
		t.Fatalf("ready link before the entry is Ready (%s)", p)
	}
	if !st.Pinned(h) {
		t.Fatal("the entry is not pinned by the bound pod")
	}
	if b, err := os.ReadFile(filepath.Join(st.ReadyDir(h), "model.gguf")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("ready link: %v (content equal: %v)", err, bytes.Equal(b, data))
	}
	if r.Agent.State(heldHex).Phase == PhaseReady {
		t.Fatal("the held prewarm finished; the bind did not overtake it")
	}
	want := []string{"Normal " + ReasonWeightsFetchStarted, "Normal " + ReasonWeightsReady}
	for _, w := range want {
		select {
		case ev := <-rec.Events:
			if !strings.HasPrefix(ev, w+" ") {
				t.Fatalf("event %q, want %s", ev, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", w)
		}
	}
	for range 3 {
		r.Reconcile(ctx, reconcile.Request{})
	}
	select {
	case ev := <-rec.Events:
		t.Fatalf("extra event %q after the fetch", ev)
	case <-time.After(100 * time.Millisecond):
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the Model's source was fetched %d times, want 1", n)
	}
}
