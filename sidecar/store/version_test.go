package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func TestVersionClockOnlyGrows(t *testing.T) {
	now := time.UnixMicro(1_000_000)
	c := versionClock{now: func() time.Time { return now }}
	for _, tc := range []struct {
		name    string
		now     int64 // wall clock in µs
		observe int64 // a version read before next (0: none)
		want    int64
	}{
		{"from the clock", 1_000_000, 0, 1_000_000},
		{"same microsecond", 1_000_000, 0, 1_000_001},
		{"clock went back", 500, 0, 1_000_002},
		{"clock ahead", 2_000_000, 0, 2_000_000},
		{"read a version ahead of the clock", 2_000_001, 9_000_000, 9_000_001},
		{"read an older version", 2_000_002, 5, 9_000_002},
	} {
		now = time.UnixMicro(tc.now)
		if tc.observe > 0 {
			c.observe(tc.observe)
		}
		if got := c.next(); got != tc.want {
			t.Errorf("%s: next = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestVersionsGrowAcrossRestore restores Redis from a snapshot taken before
// the last write a client saw (version v2). Whether the sidecar lived through
// the restore or started after it, the next write must get a version above
// v2, and an If-Match naming v2 must fail: versions never go back, so a
// version a client saw is never reissued for other content.
func TestVersionsGrowAcrossRestore(t *testing.T) {
	for _, tc := range []struct {
		name       string
		newSidecar bool
	}{
		{"sidecar that lived through the restore", false},
		{"sidecar started after the restore", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			r := ring(t, "k", 1, "k")
			s := newStore(t, srv.Addr, "restore", r, Options{})
			ctx := context.Background()
			v1, err := s.Put(ctx, "c", []byte(`{"n":1}`), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := srv.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			v2, err := s.Put(ctx, "c", []byte(`{"n":2}`), v1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Restore(snap); err != nil {
				t.Fatal(err)
			}
			if tc.newSidecar {
				s = newStore(t, srv.Addr, "restore", r, Options{})
			}
			got := getEventually(t, s, "c")
			if got.Version != v1 || string(got.Data) != `{"n":1}` {
				t.Fatalf("after the restore: version %d %s, want the snapshot's %d {\"n\":1}", got.Version, got.Data, v1)
			}
			v3, err := s.Put(ctx, "c", []byte(`{"n":3}`), v1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if v3 <= v2 {
				t.Fatalf("write after the restore got version %d, not above %d seen before it", v3, v2)
			}
			if _, err := s.Put(ctx, "c", []byte(`{"stale":true}`), v2, 0); !errors.Is(err, ErrConflict) {
				t.Fatalf("If-Match %d (seen before the restore) = %v, want ErrConflict", v2, err)
			}
		})
	}
}

// TestRecreateAfterDeleteByClockBehind deletes a session from a sidecar whose
// clock is an hour ahead of another's; the other re-creates it. Its version
// must exceed the delete's (the tenant floor), so an If-Match naming any
// version of the deleted session fails.
func TestRecreateAfterDeleteByClockBehind(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	r := ring(t, "k", 1, "k")
	ahead := newStore(t, srv.Addr, "skew", r, Options{})
	ahead.clock.now = func() time.Time { return time.Now().Add(time.Hour) }
	behind := newStore(t, srv.Addr, "skew", r, Options{})
	ctx := context.Background()
	v1, err := ahead.Put(ctx, "c", []byte(`{"n":1}`), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ahead.Delete(ctx, "c", v1); err != nil {
		t.Fatal(err)
	}
	v2, err := behind.Put(ctx, "c", []byte(`{"n":2}`), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v2 <= v1 {
		t.Fatalf("re-created at version %d, not above the deleted %d", v2, v1)
	}
	if _, err := behind.Put(ctx, "c", []byte(`{"n":3}`), v1, 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("If-Match of the deleted version = %v, want ErrConflict", err)
	}
	// An unconditional write from the clock behind still lands above v2.
	v3, err := behind.Put(ctx, "d", []byte(`{}`), -1, 0)
	if err != nil || v3 <= v1 {
		t.Fatalf("write of another session = %d, %v; want above the floor %d", v3, err, v1)
	}
}

// getEventually reads id, retrying while Redis is not yet serving again.
func getEventually(t *testing.T, s *Store, id string) *Session {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.Get(context.Background(), id)
		if err == nil {
			return got
		}
		if !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOlderFrameRefusedAsCurrent writes a session's older frame back over
// the current one, keeping the current version (what a pod with write access
// to Redis can do): the frame binds its version, so the read fails
// authentication instead of serving the older content as current.
func TestOlderFrameRefusedAsCurrent(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newStore(t, srv.Addr, "replay", ring(t, "k", 1, "k"), Options{})
	ctx := context.Background()
	v1, err := s.Put(ctx, "c", []byte(`{"n":1}`), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.rdb.HGet(ctx, s.Key("c"), "d").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "c", []byte(`{"n":2}`), v1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.HSet(ctx, s.Key("c"), "d", old).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "c"); !errors.Is(err, frame.ErrAuth) {
		t.Fatalf("Get of the older frame under the current version = %+v, %v; want frame.ErrAuth", got, err)
	}
}
