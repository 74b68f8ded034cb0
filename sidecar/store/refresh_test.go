package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// TestRefreshOnReadDeferredOrImmediate checks the refresher's invariant: a
// read of an entry with ample TTL left is refreshed by the batched loop
// shortly after, and one close to expiry (or read while no loop runs) is
// refreshed before Get returns.
func TestRefreshOnReadDeferredOrImmediate(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	const ttl = 20 * time.Second
	for i, tc := range []struct {
		name      string
		loop      bool
		left      time.Duration // remaining TTL forced before the read
		immediate bool          // refreshed before Get returns
	}{
		{"ample time left: deferred to the loop", true, 8 * time.Second, false},
		{"close to expiry: refreshed at once", true, 700 * time.Millisecond, true},
		{"no loop running: refreshed at once", false, 8 * time.Second, true},
	} {
		id := fmt.Sprintf("r%d", i)
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, srv.Addr, "refresh", ring(t, "k", 1, "k"), Options{RefreshOnRead: true})
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if tc.loop {
				go s.Run(rctx, 200*time.Millisecond) // margin 1.8s
				deadline := time.Now().Add(5 * time.Second)
				for !s.refresher.running.Load() && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			if _, err := s.Put(ctx, id, []byte(`{"a":1}`), -1, ttl); err != nil {
				t.Fatal(err)
			}
			if err := s.rdb.PExpire(ctx, s.Key(id), tc.left).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, id); err != nil {
				t.Fatal(err)
			}
			pttl := func() time.Duration { return s.rdb.PTTL(ctx, s.Key(id)).Val() }
			got := pttl()
			if refreshed := got > tc.left+time.Second; refreshed != tc.immediate {
				t.Fatalf("PTTL right after Get = %s (forced to %s): refreshed=%v, want %v", got, tc.left, refreshed, tc.immediate)
			}
			if tc.immediate {
				return
			}
			deadline := time.Now().Add(3 * time.Second)
			for pttl() < ttl-5*time.Second {
				if time.Now().After(deadline) {
					t.Fatalf("deferred refresh never landed: PTTL %s", pttl())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
