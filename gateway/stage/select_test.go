package stage

import (
	"context"
	"fmt"
	"testing"
)

func TestDefaultSelector(t *testing.T) {
	a, b, c := PoolRef{Namespace: "ns", Name: "a"}, PoolRef{Namespace: "ns", Name: "b"}, PoolRef{Namespace: "ns", Name: "c"}
	sel := DefaultSelector{}
	pick := func(key string, cands ...Candidate) PoolRef {
		t.Helper()
		p, err := sel.Select(context.Background(), &Request{SessionKey: key, Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := sel.Select(context.Background(), &Request{}); err == nil {
		t.Fatal("no candidates accepted")
	}
	if got := pick("", Candidate{Pool: a, Ready: 1}, Candidate{Pool: b, Ready: 3}); got != b {
		t.Fatalf("no key: %v, want the pool with the most ready endpoints", got)
	}
	if got := pick("k", Candidate{Pool: a, Ready: 0}, Candidate{Pool: b, Ready: 2}); got != b {
		t.Fatalf("a pool without ready endpoints chosen: %v", got)
	}
	// A session stays on its pool, and sessions spread over the pools.
	count := map[PoolRef]int{}
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("s%d", i)
		first := pick(key, Candidate{Pool: a, Ready: 1}, Candidate{Pool: b, Ready: 1}, Candidate{Pool: c, Ready: 1})
		if again := pick(key, Candidate{Pool: c, Ready: 1}, Candidate{Pool: a, Ready: 1}, Candidate{Pool: b, Ready: 1}); again != first {
			t.Fatalf("session %s moved from %v to %v when the candidates were reordered", key, first, again)
		}
		count[first]++
	}
	for _, p := range []PoolRef{a, b, c} {
		if count[p] < 60 {
			t.Fatalf("pool %v got %d of 300 sessions", p, count[p])
		}
	}
}
