package sessionroute

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// settable is a Lookup whose view of one session the test sets (the informer cache).
type settable struct {
	mu sync.Mutex
	v  View
}

func (s *settable) PoolActive(string, string) ([]string, error) { return nil, nil }

func (s *settable) Session(string, string) View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

func (s *settable) set(v View) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v = v
}

// waitHeld waits until n requests hold a subscription to a/s.
func waitHeld(t *testing.T, c *Changes, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.held("a", "s") != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d held subscriptions, want %d", c.held("a", "s"), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHoldWakesOnChange: with Changes, a held request is answered as soon as the informer's
// event for its session comes (the poll is an hour, the timeout never fires), not on a poll;
// events of other sessions do not answer it (though the cache already says it serves); its
// subscription ends with it.
func TestHoldWakesOnChange(t *testing.T) {
	lk := &settable{v: susp}
	ch := &Changes{}
	timeout := make(chan time.Time)
	r := &Router{Lookup: lk, Activity: &fakeRecorder{}, Changes: ch, Cfg: Config{Poll: time.Hour, Timeout: time.Hour},
		After: func(time.Duration) <-chan time.Time { return timeout }}
	type result struct {
		ep  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, oerr := r.Await(context.Background(), "a", "s")
		if oerr != nil {
			done <- result{err: oerr}
			return
		}
		done <- result{ep: e.Addr}
	}()
	waitHeld(t, ch, 1)
	lk.set(running)
	ch.Notify("a", "other")
	ch.Notify("b", "s") // another namespace's session of that name
	select {
	case got := <-done:
		t.Fatalf("answered without an event of its session: %+v", got)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	ch.Notify("a", "s")
	select {
	case got := <-done:
		if got.err != nil || got.ep != ep.Addr {
			t.Fatalf("Await = %+v, want %s", got, ep.Addr)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("woken %v after the event", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event did not wake the held request")
	}
	waitHeld(t, ch, 0)
}

// TestHoldTimeoutWithChanges: with Changes and no event, the injected timeout ends the hold with
// the 504 naming the session and its phase; a change just before the subscription is seen at
// once (the re-read after subscribing).
func TestHoldTimeoutWithChanges(t *testing.T) {
	lk := &settable{v: susp}
	ch := &Changes{}
	timeout := make(chan time.Time, 1)
	r := &Router{Lookup: lk, Activity: &fakeRecorder{}, Changes: ch, Cfg: Config{Poll: time.Hour, Timeout: 42 * time.Second},
		After: func(d time.Duration) <-chan time.Time {
			if d != 42*time.Second {
				t.Errorf("timeout %v, want 42s", d)
			}
			return timeout
		}}
	done := make(chan int, 1)
	var msg string
	go func() {
		_, oerr := r.Await(context.Background(), "a", "s")
		if oerr != nil {
			msg = oerr.Body.Message
			done <- oerr.Status
			return
		}
		done <- http.StatusOK
	}()
	waitHeld(t, ch, 1)
	timeout <- time.Now()
	select {
	case st := <-done:
		if st != http.StatusGatewayTimeout || msg != "session s is still Suspended after waiting 42s for it to serve" {
			t.Fatalf("status %d %q, want 504 naming the session and its phase", st, msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the timeout did not end the hold")
	}

	// Serving by the time the request subscribes (no event will come): answered at once.
	seq := &fakeLookup{views: map[string][]View{"a/s": {susp, running}}}
	r = &Router{Lookup: seq, Activity: &fakeRecorder{}, Changes: &Changes{}, Cfg: Config{Poll: time.Hour, Timeout: time.Hour}}
	got, oerr := r.Await(context.Background(), "a", "s")
	if oerr != nil || got.Addr != ep.Addr {
		t.Fatalf("Await = %+v %v, want %s at once", got, oerr, ep.Addr)
	}
}
