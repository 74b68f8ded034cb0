package affinity

import (
	"fmt"
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

// The bounded-load placement itself is tested through the Picker that applies it:
// gateway/pick TestPickerLoadBound.
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
