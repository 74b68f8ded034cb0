package sessionroute

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestAwaitProbesAResumedPod: a held request whose session comes up Running is sent to the pod
// only once the probe succeeds (a Ready pod without a readiness probe may not listen yet); a
// pod that never listens ends in 504 at the hold's timeout; a session serving at once is not
// probed.
func TestAwaitProbesAResumedPod(t *testing.T) {
	for _, tc := range []struct {
		name       string
		views      []View
		refusals   int // probes refused before one succeeds (-1: never)
		wantStatus int
		wantProbes int
	}{
		{name: "resumed, listening after two refusals", views: []View{susp, resum, running}, refusals: 2, wantProbes: 3},
		{name: "resumed, listening at once", views: []View{susp, running}, wantProbes: 1},
		{name: "serving at once: not probed", views: []View{running}, refusals: -1},
		{name: "resumed, never listening: 504", views: []View{susp, running}, refusals: -1, wantStatus: 504, wantProbes: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			probes := 0
			probe := func(_ context.Context, addr string) error {
				mu.Lock()
				defer mu.Unlock()
				if addr != ep.Addr {
					t.Errorf("probed %s, want %s", addr, ep.Addr)
				}
				probes++
				if tc.refusals < 0 || probes <= tc.refusals {
					return errors.New("connection refused")
				}
				return nil
			}
			r := &Router{Lookup: &fakeLookup{views: map[string][]View{"a/s": tc.views}}, Activity: &fakeRecorder{},
				Cfg: Config{Timeout: 300 * time.Millisecond, Poll: time.Millisecond}, Probe: probe, ProbeInterval: time.Millisecond}
			got, err := r.Await(context.Background(), "a", "s")
			mu.Lock()
			defer mu.Unlock()
			if tc.wantStatus != 0 {
				if err == nil || err.Status != tc.wantStatus {
					t.Fatalf("Await = %+v, %+v; want %d", got, err, tc.wantStatus)
				}
				if probes < 2 {
					t.Fatalf("%d probes before the timeout, want them repeated", probes)
				}
				return
			}
			if err != nil || got != ep {
				t.Fatalf("Await = %+v, %+v", got, err)
			}
			if want := max(tc.wantProbes, 0); probes != want {
				t.Fatalf("%d probes, want %d", probes, want)
			}
		})
	}
}

// TestProbeDial: a listener accepts the probe; a closed port refuses it.
func TestProbeDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := ProbeDial(context.Background(), addr); err != nil {
		t.Fatalf("probe of a listener: %v", err)
	}
	l.Close()
	if err := ProbeDial(context.Background(), addr); err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
}
