package metrics

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
)

func TestRateWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRateWindow()
	r.now = func() time.Time { return now }
	l := labels3{"c", "m", "output"}
	for i := 0; i < 9; i++ {
		r.add(l, 90)
		now = now.Add(time.Second)
	}
	if got := r.rates()[l]; got != 90 {
		t.Fatalf("rate %v, want 90", got)
	}
	now = now.Add(20 * time.Second)
	if got := r.rates()[l]; got != 0 {
		t.Fatalf("rate after idle %v", got)
	}
}

func TestPoolView(t *testing.T) {
	ref := route.PoolRef{Namespace: "ns", Name: "p"}
	tbl := route.NewTable(route.NewSnapshot([]*route.Pool{{Ref: ref, Endpoints: []route.Endpoint{{Pod: "a"}, {Pod: "b"}}}}))
	s := NewPoolStats()
	s.AddQueued(ref, "", 100)
	s.AddQueued(ref, "a", 40)
	s.ObserveTTFT(ref, "a", 0.2)
	s.ObserveTTFT(ref, "a", 2)
	s.ObserveArrival(ref, 1500)
	s.ObserveArrival(ref, 500)
	h := s.Handler(tbl, func(_ context.Context, _ route.PoolRef, pods []string) (map[string]int, bool) {
		return map[string]int{"a": 3}, true
	})
	req := httptest.NewRequest("GET", "/pools/ns/p/metrics", nil)
	req.SetPathValue("namespace", "ns")
	req.SetPathValue("name", "p")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Body)
	out := string(b)
	for _, want := range []string{
		`neuronetes_tokens_in_queue{pod=""} 100`, `neuronetes_tokens_in_queue{pod="a"} 40`, `neuronetes_tokens_in_queue{pod="b"} 0`,
		`neuronetes_concurrent_sessions{pod="a",scope="shared"} 3`, `neuronetes_ttft_seconds_count{pod="a"} 2`,
		`neuronetes_ttft_seconds_bucket{pod="a",le="0.2"} 1`, `neuronetes_ttft_seconds_bucket{pod="a",le="2"} 2`,
		`neuronetes_offered_prompt_tokens_total{pod=""} 2000`,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %q in\n%s", want, out)
		}
	}
	req.SetPathValue("name", "nope")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 404 {
		t.Fatalf("unknown pool: %d", w.Code)
	}
}
