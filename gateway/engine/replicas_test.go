package engine

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// TestCapacityAcrossReplicas: two gateway replicas in front of the same two pods (capacity 2
// each) admit at most the pool's 4 in flight together when they count each other through
// Redis; without the count each would admit 4 (the control, so the check can fail).
func TestCapacityAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, tc := range []struct {
		name   string
		shared bool
		max    int64 // the most in flight at the pods that is allowed (shared) or expected (not)
	}{{"replicas count each other", true, 4}, {"each replica alone", false, 8}} {
		t.Run(tc.name, func(t *testing.T) {
			var inflight, peak atomic.Int64
			slow := func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				n := inflight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(300 * time.Millisecond)
				inflight.Add(-1)
				streamTokens(1, 0)(w, r, body)
			}
			a, b := newBackend(t), newBackend(t)
			a.set(slow)
			b.set(slow)
			var hs []*harness
			for i := 0; i < 2; i++ {
				h := newHarness(t, a, b)
				h.pool.Policy.MaxInFlightPerEndpoint = 2
				if tc.shared {
					rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
					t.Cleanup(func() { rc.Close() })
					h.e.Peers = &quota.Peers{Client: rc, Prefix: "gw-" + tc.name + ":"}
				}
				hs = append(hs, h)
			}
			for _, h := range hs {
				if err := h.e.Peers.Beat(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			for _, h := range hs {
				_ = h.e.Peers.Beat(context.Background())
				if tc.shared && h.e.Peers.Count() != 2 {
					t.Fatalf("a replica counts %d replicas, want 2", h.e.Peers.Count())
				}
			}
			var wg sync.WaitGroup
			for _, h := range hs {
				for i := 0; i < 8; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if s := h.do(context.Background(), anyone, nil, chat(false, "")); s.err != nil {
							t.Errorf("request: %v", s.err)
						}
					}()
				}
			}
			wg.Wait()
			if tc.shared && peak.Load() > tc.max {
				t.Fatalf("%d requests in flight at the pods, over the pool's capacity %d", peak.Load(), tc.max)
			}
			if !tc.shared && peak.Load() <= 4 {
				t.Fatalf("control: %d in flight; each replica alone should pass the pool's 4 (up to %d together)", peak.Load(), tc.max)
			}
		})
	}
}
