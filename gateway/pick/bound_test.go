package pick

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/affinity"
)

// TestPickerLoadBound drives Picker.Pick (the weighted strategy, and the soonest strategy, which
// lets a pod exceed the bound only for a cache hit the exact index knows of, TestSoonestBounded)
// with arrivals and random departures, every request's prompt prefix on pod-0 by the approximate
// index so that the prefix scorer and the guessed cache hit pull all traffic there: the pod
// Pick chooses never holds more than LoadBound(total+1) after taking the request, while requests
// only arrive no pod exceeds the bound, and pod-0 does reach the bound (the pressure is real, so
// a Picker that ignored the bound would fail the check).
func TestPickerLoadBound(t *testing.T) {
	for _, tc := range []struct {
		n        int
		eps      float64
		strategy string
	}{{2, 0.25, StrategyWeighted}, {4, 0.25, StrategyWeighted}, {8, 0.1, StrategyWeighted}, {5, 0, StrategyWeighted},
		{2, 0.25, StrategySoonest}, {4, 0.25, StrategySoonest}, {8, 0.1, StrategySoonest}} {
		t.Run(fmt.Sprintf("%s,n=%d,eps=%v", tc.strategy, tc.n, tc.eps), func(t *testing.T) {
			p := testPool(tc.n)
			p.Policy.LoadFactor = tc.eps
			p.Policy.Weights.PrefixCache = 10
			pk := &Picker{Load: NewLoad(), Prefix: NewPrefixIndex(8, 10000), Strategy: tc.strategy}
			blocks := pk.Prefix.Blocks(pool, strings.Repeat("the shared system prompt ", 8))
			pk.Prefix.Record(blocks, "pod-0")
			rng := rand.New(rand.NewPCG(7, uint64(tc.n)))
			var open []*Lease
			reachedBound := false
			for step := 0; step < 5000; step++ {
				arrivalsOnly := step < 500
				if !arrivalsOnly && len(open) > 0 && rng.IntN(3) == 0 {
					i := rng.IntN(len(open))
					open[i].Release()
					open = append(open[:i], open[i+1:]...)
					continue
				}
				bound := affinity.LoadBound(pk.Load.Pool(pool), tc.n, tc.eps)
				ch, ok := pk.Pick(p, Input{RingKey: fmt.Sprintf("s%d", rng.IntN(300)), Blocks: blocks, PromptTokens: 100})
				if !ok {
					t.Fatalf("step %d: nothing picked", step)
				}
				open = append(open, pk.Load.Acquire(pool, ch.Endpoint.Pod, 100, ch.Uncached))
				reqs, _, _ := pk.Load.Pod(pool, ch.Endpoint.Pod)
				if reqs > bound {
					t.Fatalf("step %d: Pick chose %s, which now has %d > bound %d", step, ch.Endpoint.Pod, reqs, bound)
				}
				if ch.Endpoint.Pod == "pod-0" && reqs == bound && bound > 1 {
					reachedBound = true
				}
				if arrivalsOnly {
					for _, e := range p.Endpoints {
						if r, _, _ := pk.Load.Pod(pool, e.Pod); r > bound {
							t.Fatalf("step %d: %s has %d > bound %d while requests only arrive", step, e.Pod, r, bound)
						}
					}
				}
			}
			if !reachedBound {
				t.Fatal("pod-0 never reached the bound: the test put no pressure on it")
			}
		})
	}
}
