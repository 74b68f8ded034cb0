package scaleloop

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// replica serves one gateway replica's view of pool ns/chat at ip:port.
func replica(t *testing.T, ip string, port int, body string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Skipf("listen on %s: %v", ip, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pools/ns/chat/metrics", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

func hist(pod string, le05, le1, count int, sum float64) string {
	return fmt.Sprintf(`neuronetes_ttft_seconds_bucket{pod=%q,le="0.5"} %d
neuronetes_ttft_seconds_bucket{pod=%q,le="1"} %d
neuronetes_ttft_seconds_bucket{pod=%q,le="+Inf"} %d
neuronetes_ttft_seconds_sum{pod=%q} %v
neuronetes_ttft_seconds_count{pod=%q} %d
`, pod, le05, pod, le1, pod, count, pod, sum, pod, count)
}

const head = "# TYPE neuronetes_tokens_in_queue gauge\n# TYPE neuronetes_concurrent_sessions gauge\n# TYPE neuronetes_ttft_seconds histogram\n"

func gwPod(name, ip string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sys", Labels: map[string]string{"app": "gw"}},
		Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

// The source sums the replicas: tokens in queue add up (the gateway's own queue spread over the
// pods), shared session counts are taken once, replica-local ones add up, TTFT histograms merge.
func TestGatewaySourceOverlay(t *testing.T) {
	port := replica(t, "127.0.0.1", 0, head+
		`neuronetes_tokens_in_queue{pod=""} 60
neuronetes_tokens_in_queue{pod="a"} 100
neuronetes_tokens_in_queue{pod="b"} 0
neuronetes_concurrent_sessions{pod="a",scope="shared"} 3
neuronetes_concurrent_sessions{pod="b",scope="shared"} 1
# TYPE neuronetes_offered_prompt_tokens_total counter
neuronetes_offered_prompt_tokens_total{pod=""} 4000
`+hist("a", 1, 2, 2, 1.2)+hist("b", 0, 0, 0, 0))
	replica(t, "127.0.0.2", port, head+
		`neuronetes_tokens_in_queue{pod=""} 0
neuronetes_tokens_in_queue{pod="a"} 50
neuronetes_tokens_in_queue{pod="b"} 10
neuronetes_concurrent_sessions{pod="a",scope="shared"} 3
neuronetes_concurrent_sessions{pod="b",scope="shared"} 1
`+hist("a", 1, 1, 1, 0.3)+hist("b", 0, 1, 1, 0.9))
	c := fake.NewClientBuilder().WithObjects(gwPod("gw-1", "127.0.0.1", true), gwPod("gw-2", "127.0.0.2", true),
		gwPod("gw-3", "127.0.0.3", false)).Build()
	src := &GatewaySource{Client: c, Namespace: "sys", Selector: labels.SelectorFromSet(labels.Set{"app": "gw"}), Port: port}
	pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "ns"}}
	samples := map[string]PodSample{"a": {TokensInQueue: 1, Sessions: 1}, "b": {}, "c": {TokensInQueue: 7}}
	offered := src.Overlay(context.Background(), pool, samples)
	if len(offered) != 1 || offered["gw-1"] != 4000 {
		t.Fatalf("offered counters %v, want gw-1: 4000 (gw-2 exports none)", offered)
	}
	a, b := samples["a"], samples["b"]
	if a.TokensInQueue != 170 || b.TokensInQueue != 30 || samples["c"].TokensInQueue != 7 {
		t.Fatalf("tokens in queue a=%v b=%v c=%v; want 150+20, 10+20, c untouched", a.TokensInQueue, b.TokensInQueue, samples["c"].TokensInQueue)
	}
	if a.Sessions != 3 || b.Sessions != 1 {
		t.Fatalf("sessions a=%v b=%v: shared counts are taken once", a.Sessions, b.Sessions)
	}
	if a.TTFT == nil || a.TTFT.Count != 3 || b.TTFT.Count != 1 {
		t.Fatalf("ttft %+v %+v", a.TTFT, b.TTFT)
	}
	if p95, _ := a.TTFT.Quantile(0.95); p95 <= 0.5 || p95 > 1 {
		t.Fatalf("p95 %v", p95)
	}
}

func TestGatewaySourceReplicaLocalAndFailure(t *testing.T) {
	port := replica(t, "127.0.0.1", 0, head+`neuronetes_concurrent_sessions{pod="a",scope="replica"} 2
`)
	replica(t, "127.0.0.2", port, head+`neuronetes_concurrent_sessions{pod="a",scope="replica"} 5
`)
	c := fake.NewClientBuilder().WithObjects(gwPod("gw-1", "127.0.0.1", true), gwPod("gw-2", "127.0.0.2", true)).Build()
	src := &GatewaySource{Client: c, Namespace: "sys", Selector: labels.SelectorFromSet(labels.Set{"app": "gw"}), Port: port}
	samples := map[string]PodSample{"a": {Sessions: 1}}
	src.Overlay(context.Background(), &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "ns"}}, samples)
	if samples["a"].Sessions != 7 {
		t.Fatalf("replica-local sessions %v, want 2+5", samples["a"].Sessions)
	}
	// A pool no replica knows: the samples stay as they are.
	samples = map[string]PodSample{"a": {Sessions: 1}}
	src.Overlay(context.Background(), &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns"}}, samples)
	if samples["a"].Sessions != 1 {
		t.Fatalf("failed read changed the samples: %+v", samples["a"])
	}
}

// countingReader counts the lists that reach the reader it wraps.
type countingReader struct {
	client.Reader
	lists int
}

func (c *countingReader) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	c.lists++
	return c.Reader.List(ctx, l, opts...)
}

func TestGatewaySourceListTTL(t *testing.T) {
	port := replica(t, "127.0.0.1", 0, head+`neuronetes_concurrent_sessions{pod="a",scope="replica"} 2
`)
	r := &countingReader{Reader: fake.NewClientBuilder().WithObjects(gwPod("gw-1", "127.0.0.1", true)).Build()}
	now := time.Unix(1000, 0)
	src := &GatewaySource{Client: r, ListTTL: 5 * time.Second, Now: func() time.Time { return now },
		Namespace: "sys", Selector: labels.SelectorFromSet(labels.Set{"app": "gw"}), Port: port}
	pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "ns"}}
	for _, tc := range []struct {
		advance   time.Duration
		wantLists int
	}{
		{0, 1},               // the first read lists
		{4 * time.Second, 1}, // within the TTL: the same list
		{time.Second, 2},     // 5 s after the list: listed again
		{0, 2},
	} {
		now = now.Add(tc.advance)
		samples := map[string]PodSample{"a": {}}
		src.Overlay(context.Background(), pool, samples)
		if samples["a"].Sessions != 2 {
			t.Fatalf("after %v: sessions %v, want 2 from the gateway", tc.advance, samples["a"].Sessions)
		}
		if r.lists != tc.wantLists {
			t.Fatalf("after %v: %d lists, want %d", tc.advance, r.lists, tc.wantLists)
		}
	}
}

func TestOfferedRate(t *testing.T) {
	var o OfferedRate
	steps := []struct {
		name     string
		after    time.Duration
		counters map[string]float64
		want     scalepolicy.OfferedDemand
	}{
		{"first reading", 0, map[string]float64{"gw-1": 1000, "gw-2": 0}, scalepolicy.OfferedDemand{}},
		{"both replicas", 10 * time.Second, map[string]float64{"gw-1": 11000, "gw-2": 5000}, scalepolicy.OfferedDemand{Valid: true, PromptTokensPerSecond: 1500}},
		{"a restart and a new replica are left out", 10 * time.Second, map[string]float64{"gw-1": 21000, "gw-2": 10, "gw-3": 7000},
			scalepolicy.OfferedDemand{Valid: true, PromptTokensPerSecond: 1000}},
		{"gateway not read", 10 * time.Second, nil, scalepolicy.OfferedDemand{}},
		{"no replica seen twice", 10 * time.Second, map[string]float64{"gw-9": 1}, scalepolicy.OfferedDemand{}},
	}
	now := time.Unix(1000, 0)
	for _, s := range steps {
		now = now.Add(s.after)
		if got := o.Observe(now, s.counters); got != s.want {
			t.Fatalf("%s: got %+v, want %+v", s.name, got, s.want)
		}
	}
}
