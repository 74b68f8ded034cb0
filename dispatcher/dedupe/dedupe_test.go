package dedupe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// stores returns the stores under test with a function that lets time pass for them.
func stores(t *testing.T) map[string]struct {
	s    Store
	wait func(time.Duration)
} {
	now := time.Unix(1_000_000, 0)
	mem := &Memory{Now: func() time.Time { return now }}
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	return map[string]struct {
		s    Store
		wait func(time.Duration)
	}{
		"memory": {mem, func(d time.Duration) { now = now.Add(d) }},
		"redis":  {NewRedis(rc, "t:"), time.Sleep},
	}
}

const lease = 300 * time.Millisecond

// TestLifecycle walks one message through two replicas: a takeover after the lease expires, the
// fencing of the replica that lost it, the stored outcome handed to the next owner, and the done
// record that makes every later delivery an acknowledgement.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := st.s
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			r, err := s.Begin(ctx, "ns/b", "m1", "a", lease, time.Hour)
			must(err)
			if r.State != Acquired || r.Failures != 0 || r.Starts != 0 {
				t.Fatalf("first begin = %+v", r)
			}
			n, err := s.StartAttempt(ctx, "ns/b", "m1", "a")
			must(err)
			if n != 1 {
				t.Fatalf("starts = %d", n)
			}
			if f, err := s.Fail(ctx, "ns/b", "m1", "a", "gateway: 503"); err != nil || f != 1 {
				t.Fatalf("fail = %d, %v", f, err)
			}
			// Another replica is told to wait while a's lease is live.
			r, err = s.Begin(ctx, "ns/b", "m1", "b", lease, time.Hour)
			must(err)
			if r.State != Busy || r.Wait <= 0 || r.Wait > lease {
				t.Fatalf("begin by b during a's lease = %+v", r)
			}
			// a's lease runs out: b takes over, sees the failure so far, and a is fenced.
			st.wait(lease + 100*time.Millisecond)
			r, err = s.Begin(ctx, "ns/b", "m1", "b", lease, time.Hour)
			must(err)
			if r.State != Acquired || r.Failures != 1 || r.Starts != 1 || r.LastError != "gateway: 503" {
				t.Fatalf("takeover = %+v", r)
			}
			if err := s.SaveOutcome(ctx, "ns/b", "m1", "a", Result, []byte("x"), nil); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("save by the fenced replica: %v, want ErrLeaseLost", err)
			}
			must(s.Renew(ctx, "ns/b", "m1", "b", lease))
			must(s.SaveOutcome(ctx, "ns/b", "m1", "b", Result, []byte(`{"answer":1}`), []byte(`{"request-id":"r1"}`)))
			// b dies before publishing: the next owner gets the stored result, not a new run.
			st.wait(lease + 100*time.Millisecond)
			r, err = s.Begin(ctx, "ns/b", "m1", "c", lease, time.Hour)
			must(err)
			if r.State != Result || string(r.Outcome) != `{"answer":1}` || string(r.Meta) != `{"request-id":"r1"}` || r.Saved.IsZero() {
				t.Fatalf("begin after a stored result = %+v", r)
			}
			must(s.Finish(ctx, "ns/b", "m1", "c", Done, time.Hour))
			for _, who := range []string{"a", "b", "c"} {
				r, err = s.Begin(ctx, "ns/b", "m1", who, lease, time.Hour)
				must(err)
				if r.State != Done {
					t.Fatalf("begin by %s after done = %+v", who, r)
				}
			}
			// Ids and bindings are separate records.
			r, err = s.Begin(ctx, "ns/other", "m1", "a", lease, time.Hour)
			must(err)
			if r.State != Acquired {
				t.Fatalf("same id, other binding = %+v", r)
			}
		})
	}
}

// TestDeadLetterAndRelease: a dead-pending outcome is handed over like a result and ends Dead;
// Release lets another replica in at once; the done record expires after its TTL.
func TestDeadLetterAndRelease(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := st.s
			if _, err := s.Begin(ctx, "ns/b", "p", "a", time.Minute, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, "ns/b", "p", "a"); err != nil {
				t.Fatal(err)
			}
			r, err := s.Begin(ctx, "ns/b", "p", "b", time.Minute, time.Hour)
			if err != nil || r.State != Acquired {
				t.Fatalf("begin after release = %+v, %v", r, err)
			}
			if err := s.SaveOutcome(ctx, "ns/b", "p", "b", DeadPending, []byte("poison"), []byte("m")); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, "ns/b", "p", "b"); err != nil {
				t.Fatal(err)
			}
			r, err = s.Begin(ctx, "ns/b", "p", "c", time.Minute, time.Hour)
			if err != nil || r.State != DeadPending || string(r.Outcome) != "poison" {
				t.Fatalf("begin on dead-pending = %+v, %v", r, err)
			}
			if err := s.Finish(ctx, "ns/b", "p", "c", Dead, 400*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if r, _ = s.Begin(ctx, "ns/b", "p", "d", time.Minute, time.Hour); r.State != Dead {
				t.Fatalf("begin after dead = %+v", r)
			}
			if err := s.Finish(ctx, "ns/b", "p", "c", Acquired, time.Hour); err == nil {
				t.Fatal("Finish accepted a non-final state")
			}
			st.wait(600 * time.Millisecond)
			if r, _ = s.Begin(ctx, "ns/b", "p", "e", time.Minute, time.Hour); r.State != Acquired {
				t.Fatalf("begin after the record's TTL = %+v, want a fresh record", r)
			}
		})
	}
}

func TestCounters(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := st.s
			for i := 0; i < 3; i++ {
				if err := s.Count(ctx, "ns/b", map[string]int64{"received": 2, "succeeded": 1, "zero": 0}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := s.Counters(ctx, "ns/b")
			if err != nil {
				t.Fatal(err)
			}
			if c["received"] != 6 || c["succeeded"] != 3 || c["zero"] != 0 {
				t.Fatalf("counters = %v", c)
			}
		})
	}
}
