package store

import (
	"context"
	"errors"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// TestStagedWriteLeavesNothing checks the staged write: successful and
// conflicting writes leave no staging hash behind, a Redis that lost its
// scripts (restart, SCRIPT FLUSH) gets them again, and an entry keeps its
// fields and TTL.
func TestStagedWriteLeavesNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newStore(t, srv.Addr, "stage", ring(t, "k", 1, "k"), Options{})
	ctx := context.Background()
	v1, err := s.Put(ctx, "c", []byte(`{"a":1}`), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "c", []byte(`{"a":2}`), v1+7, 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale CAS = %v, want ErrConflict", err)
	}
	if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	v2, err := s.Put(ctx, "c", []byte(`{"a":3}`), v1, 0)
	if err != nil || v2 <= v1 {
		t.Fatalf("Put after SCRIPT FLUSH = %d, %v", v2, err)
	}
	left, err := s.rdb.Keys(ctx, "nn:{stage}:stage:*").Result()
	if err != nil || len(left) != 0 {
		t.Fatalf("staging keys left: %v (%v)", left, err)
	}
	fields, err := s.rdb.HKeys(ctx, s.Key("c")).Result()
	if err != nil || len(fields) != 3 {
		t.Fatalf("session hash fields %v (%v), want v, d, t", fields, err)
	}
	if ttl, err := s.rdb.PTTL(ctx, s.Key("c")).Result(); err != nil || ttl <= stagingTTL {
		t.Fatalf("session TTL %v (%v), want the default TTL, not the staging TTL", ttl, err)
	}
	if got, err := s.Get(ctx, "c"); err != nil || got.Version != v2 || string(got.Data) != `{"a":3}` {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}
