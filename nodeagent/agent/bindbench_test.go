package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestBindFetchBench measures a pod's cold start on a node that is prewarming other Models: the
// time from the pod's bind until its weights are ready, with the bind triggering the fetch (the pod
// names its Model, so the node agent pins it and fetches it at once: "bind"), as before this change
// (the Model is fetched as prewarm, in turn behind the others: "prewarm"), and on an idle node
// ("alone": the fetch's own time, the floor). Both run the real reconciler, agent and
// cache on a fake API, with sources served by a local HTTP server at a fixed per-stream rate (a
// remote store's per-connection throughput). hack/bench.d/27-bindfetch.sh runs it
// (NEURONETES_BENCH=1; BINDFETCH_OTHERS, BINDFETCH_SIZE_MIB, BINDFETCH_RATE_MIB, BINDFETCH_RUNS).
func TestBindFetchBench(t *testing.T) {
	if os.Getenv("NEURONETES_BENCH") != "1" {
		t.Skip("benchmark; set NEURONETES_BENCH=1 (hack/bench.d/27-bindfetch.sh does)")
	}
	others, sizeMiB := envInt("BINDFETCH_OTHERS", 4), envInt("BINDFETCH_SIZE_MIB", 8)
	rate, runs := envInt("BINDFETCH_RATE_MIB", 16)<<20, envInt("BINDFETCH_RUNS", 3)
	modes := []struct {
		name   string
		others int
		bind   bool
	}{{"alone", 0, true}, {"bind", others, true}, {"prewarm", others, false}}
	got := map[string][]time.Duration{}
	for i := range runs {
		for _, m := range modes {
			d := bindFetchRun(t, m.others, sizeMiB<<20, rate, m.bind)
			got[m.name] = append(got[m.name], d)
			fmt.Printf("bindfetch run %d %-7s (others=%d): %s\n", i, m.name, m.others, d.Round(time.Millisecond))
		}
	}
	med := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	a, b, p := med(got["alone"]), med(got["bind"]), med(got["prewarm"])
	fmt.Printf("bindfetch result: others=%d size_mib=%d rate_mib_s=%d slots=2 alone_ms=%d bind_ms=%d prewarm_ms=%d bind_vs_alone=%.3f bind_vs_prewarm=%.3f saved_ms=%d\n",
		others, sizeMiB, rate>>20, a.Milliseconds(), b.Milliseconds(), p.Milliseconds(), float64(b)/float64(a), float64(b)/float64(p), (p - b).Milliseconds())
}

// bindFetchRun creates `others` Models and the pod's Model at once (the pod's last), binds the pod
// and returns the time from the bind until the pod's weights are ready (its ready link exists).
func bindFetchRun(t *testing.T, others, size, rate int, bind bool) time.Duration {
	t.Helper()
	blobs := map[string][]byte{}
	var objs []client.Object
	var hexes []string
	for i := range others + 1 {
		data, h := blob(t, size)
		name := fmt.Sprintf("m%d", i)
		blobs["/"+name] = data
		hexes = append(hexes, h)
		objs = append(objs, &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		throttledWrite(w, blobs[r.URL.Path], rate)
	}))
	defer srv.Close()
	for i, o := range objs {
		m := o.(*v1alpha1.Model)
		m.Spec = v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: srv.URL + "/" + m.Name}, Digest: "sha256:" + hexes[i], SizeBytes: int64(size)}
	}
	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	v1alpha1.AddToScheme(scheme)
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Model{}).Build()
	st, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{MaxConcurrent: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reconciler{Client: c, APIReader: c, Agent: New(ctx, Config{Store: st, Sources: testSources}), NodeName: "n1"}
	defer func() {
		cancel()
		for r.Agent.Running() {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	target := hexes[others]
	// The Models arrive first; the prewarm of the others takes both slots.
	if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent-0", UID: types.UID(fmt.Sprint("u", bind))},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if bind {
		pod.Annotations = map[string]string{PodModelAnnotation: fmt.Sprintf("m%d", others)}
	}
	start := time.Now()
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for !(r.Agent.State(target).Phase == PhaseReady && st.Exposed(target, WeightsFileName(""))) {
		if time.Since(start) > 5*time.Minute {
			t.Fatal("the pod's weights were not ready within 5 minutes")
		}
		// The pod watch reconciles at once on a bind; 20 ms stands in for the watch's latency.
		if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// throttledWrite writes data at about rate bytes per second.
func throttledWrite(w http.ResponseWriter, data []byte, rate int) {
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	const chunk = 256 << 10
	tick := time.Duration(float64(time.Second) * chunk / float64(rate))
	for off := 0; off < len(data); off += chunk {
		if _, err := w.Write(data[off:min(off+chunk, len(data))]); err != nil {
			return
		}
		time.Sleep(tick)
	}
}
