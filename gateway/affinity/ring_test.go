package affinity

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("pool-%d-abcde", i)
	}
	return out
}

func TestRingWalkDistinctAndStable(t *testing.T) {
	r := NewRing(names(5))
	w := r.Walk("session-42", 0)
	if len(w) != 5 {
		t.Fatalf("walk len %d", len(w))
	}
	seen := map[int]bool{}
	for _, i := range w {
		if seen[i] {
			t.Fatalf("walk repeats %d: %v", i, w)
		}
		seen[i] = true
	}
	// Another replica builds the same ring from the same names.
	if w2 := NewRing(names(5)).Walk("session-42", 0); fmt.Sprint(w2) != fmt.Sprint(w) {
		t.Fatalf("rings differ: %v %v", w, w2)
	}
	if got := r.Walk("session-42", 2); fmt.Sprint(got) != fmt.Sprint(w[:2]) {
		t.Fatalf("limited walk %v, want %v", got, w[:2])
	}
}

// A key's owner moves only when its own pod leaves (consistent hashing): removing one of 8 pods
// re-homes only the keys it owned.
func TestRingConsistency(t *testing.T) {
	all := names(8)
	before := NewRing(all)
	after := NewRing(append(append([]string{}, all[:3]...), all[4:]...))
	moved := 0
	for i := 0; i < 4000; i++ {
		k := fmt.Sprintf("k%d", i)
		ob := all[before.Walk(k, 1)[0]]
		oa := after.Names()[after.Walk(k, 1)[0]]
		if ob != oa {
			moved++
			if ob != all[3] {
				t.Fatalf("key %s moved from %s (still present) to %s", k, ob, oa)
			}
		}
	}
	if moved == 0 || moved > 4000/4 {
		t.Fatalf("moved %d keys of 4000 when removing 1 of 8 pods", moved)
	}
}

// TestLoadBound places sessions with consistent hashing and bounded loads (walk the ring until a
// pod is under LoadBound) while requests finish at random: a pod under the bound always exists,
// the chosen pod never exceeds ceil((1+ε)·(total+1)/n) after taking the request, and while
// requests only arrive, no pod ever exceeds it. (Departures lower the mean, so a pod may sit
// above a later, smaller bound until its own requests end; it gets nothing new meanwhile.)
func TestLoadBound(t *testing.T) {
	for _, tc := range []struct {
		n   int
		eps float64
	}{{2, 0.25}, {4, 0.25}, {8, 0.1}, {16, 0.5}, {5, 0}} {
		t.Run(fmt.Sprintf("n=%d,eps=%v", tc.n, tc.eps), func(t *testing.T) {
			r := NewRing(names(tc.n))
			load := make([]int, tc.n)
			total := 0
			rng := rand.New(rand.NewPCG(1, uint64(tc.n)))
			type req struct{ pod int }
			var open []req
			for step := 0; step < 20000; step++ {
				arrivalsOnly := step < 2000
				if !arrivalsOnly && len(open) > 0 && rng.IntN(3) == 0 {
					i := rng.IntN(len(open))
					load[open[i].pod]--
					total--
					open = append(open[:i], open[i+1:]...)
					continue
				}
				bound := LoadBound(total, tc.n, tc.eps)
				placed := -1
				for _, p := range r.Walk(fmt.Sprintf("s%d", rng.IntN(500)), 0) {
					if load[p]+1 <= bound {
						placed = p
						break
					}
				}
				if placed < 0 {
					t.Fatalf("step %d: no pod under bound %d (loads %v)", step, bound, load)
				}
				load[placed]++
				total++
				open = append(open, req{placed})
				if load[placed] > bound {
					t.Fatalf("step %d: chosen pod %d has %d > bound %d", step, placed, load[placed], bound)
				}
				for p, l := range load {
					if arrivalsOnly && l > bound {
						t.Fatalf("step %d: pod %d has %d > bound %d", step, p, l, bound)
					}
				}
			}
		})
	}
}

func TestLoadBoundValues(t *testing.T) {
	for _, tc := range []struct {
		total, n int
		eps      float64
		want     int
	}{{0, 4, 0.25, 1}, {3, 4, 0.25, 2}, {99, 4, 0.25, 32}, {7, 2, 0, 4}, {10, 0, 0.25, 0}} {
		if got := LoadBound(tc.total, tc.n, tc.eps); got != tc.want {
			t.Errorf("LoadBound(%d,%d,%v) = %d, want %d", tc.total, tc.n, tc.eps, got, tc.want)
		}
	}
}
