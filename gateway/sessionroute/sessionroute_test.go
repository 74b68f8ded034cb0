package sessionroute

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// fakeLookup serves views per "namespace/name"; each key's views are returned in turn, the last
// one repeated.
type fakeLookup struct {
	mu    sync.Mutex
	views map[string][]View
	calls map[string]int
	// active is the number of sessions PoolActive names by "namespace/pool" (active-0, ...);
	// activeErr, when set, is its error.
	active    map[string]int
	activeErr error
}

func (f *fakeLookup) PoolActive(ns, pool string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.activeErr != nil {
		return nil, f.activeErr
	}
	var names []string
	for i := range f.active[ns+"/"+pool] {
		names = append(names, fmt.Sprintf("active-%d", i))
	}
	return names, nil
}

func (f *fakeLookup) Session(ns, name string) View {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := ns + "/" + name
	vs := f.views[k]
	if len(vs) == 0 {
		return View{}
	}
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	i := min(f.calls[k], len(vs)-1)
	f.calls[k]++
	return vs[i]
}

type fakeRecorder struct {
	mu    sync.Mutex
	wrote []string
	at    []time.Time
	err   error
}

func (f *fakeRecorder) RecordActivity(_ context.Context, ns, name string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wrote = append(f.wrote, ns+"/"+name)
	f.at = append(f.at, at)
	return f.err
}

func (f *fakeRecorder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.wrote)
}

var (
	t0      = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ep      = route.Endpoint{Pod: "s-2", Addr: "10.0.0.2:8000"}
	running = View{Found: true, Phase: v1alpha1.SessionRunning, PhaseSince: t0, Activity: t0, Endpoint: ep}
	susp    = View{Found: true, Phase: v1alpha1.SessionSuspended, PhaseSince: t0.Add(time.Minute), Activity: t0}
	resum   = View{Found: true, Phase: v1alpha1.SessionResuming, PhaseSince: t0.Add(2 * time.Minute), Activity: t0.Add(2 * time.Minute)}
)

func TestAwait(t *testing.T) {
	cases := []struct {
		name       string
		ns, sess   string
		views      []View
		timeout    time.Duration
		maxHeld    int
		preHeld    int64
		cancel     bool
		wantStatus int
		wantCode   string
		wantWrites int
		wantResult string // the wait histogram's label observed, "" for none
	}{
		{name: "running is forwarded at once and records activity", ns: "a", sess: "s", views: []View{running}, wantWrites: 1},
		{name: "unknown session is 404", ns: "a", sess: "s", views: nil, wantStatus: 404, wantCode: "session_not_found"},
		{name: "another namespace's session is the same 404", ns: "b", sess: "s", views: nil, wantStatus: 404, wantCode: "session_not_found"},
		{name: "no namespace is 404", ns: "", sess: "s", views: []View{running}, wantStatus: 404, wantCode: "session_not_found"},
		{name: "invalid name is 404", ns: "a", sess: "../x", views: []View{running}, wantStatus: 404, wantCode: "session_not_found"},
		{name: "suspended is held, woken and forwarded once serving", ns: "a", sess: "s", views: []View{susp, susp, resum, running},
			wantWrites: 1, wantResult: "served"},
		{name: "running without a ready pod is held", ns: "a", sess: "s",
			views: []View{{Found: true, Phase: v1alpha1.SessionRunning, PhaseSince: t0, Activity: t0}, running}, wantWrites: 1, wantResult: "served"},
		{name: "resume too slow is 504 naming the phase", ns: "a", sess: "s", views: []View{susp, resum}, timeout: 30 * time.Millisecond,
			wantStatus: 504, wantCode: "session_resume_timeout", wantWrites: 1, wantResult: "timeout"},
		{name: "deleted while held is 404", ns: "a", sess: "s", views: []View{susp, {}}, wantStatus: 404, wantCode: "session_not_found",
			wantWrites: 1, wantResult: "gone"},
		{name: "too many held is 503", ns: "a", sess: "s", views: []View{susp}, maxHeld: 2, preHeld: 2,
			wantStatus: 503, wantCode: "session_hold_full", wantWrites: 1, wantResult: "refused"},
		{name: "client gone while held is 499", ns: "a", sess: "s", views: []View{susp}, cancel: true,
			wantStatus: StatusClientClosed, wantCode: "client_closed", wantWrites: 1, wantResult: "cancelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lk := &fakeLookup{views: map[string][]View{}}
			if tc.views != nil {
				lk.views["a/s"] = tc.views
			}
			rec := &fakeRecorder{}
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			clock := t0.Add(3 * time.Minute)
			r := &Router{Lookup: lk, Activity: rec, Metrics: m, Now: func() time.Time { return clock },
				Cfg: Config{Timeout: tc.timeout, MaxHeld: tc.maxHeld, Poll: time.Millisecond}}
			if r.Cfg.Timeout == 0 {
				r.Cfg.Timeout = 5 * time.Second
			}
			r.held.Store(tc.preHeld)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() { time.Sleep(20 * time.Millisecond); cancel() }()
			}
			got, err := r.Await(ctx, tc.ns, tc.sess)
			if tc.wantStatus == 0 {
				if err != nil || got != ep {
					t.Fatalf("Await = %+v, %v; want %+v", got, err, ep)
				}
			} else {
				if err == nil || err.Status != tc.wantStatus || err.Body.Code == nil || *err.Body.Code != tc.wantCode {
					t.Fatalf("Await error %+v, want %d %s", err, tc.wantStatus, tc.wantCode)
				}
				if !strings.Contains(err.Body.Message, tc.sess) {
					t.Errorf("error %q does not name the session", err.Body.Message)
				}
			}
			if tc.wantStatus == 504 && !strings.Contains(err.Body.Message, "Resuming") {
				t.Errorf("timeout %q does not name the phase", err.Body.Message)
			}
			if n := rec.count(); n != tc.wantWrites {
				t.Errorf("activity writes %d, want %d", n, tc.wantWrites)
			}
			if tc.wantResult != "" {
				if n := testutil.CollectAndCount(m.Wait); n != 1 {
					t.Errorf("wait histogram has %d series, want 1", n)
				}
				if h := histCount(t, reg, tc.wantResult); h != 1 {
					t.Errorf("wait{result=%s} count %d, want 1", tc.wantResult, h)
				}
			}
			if v := testutil.ToFloat64(m.Held); v != 0 {
				t.Errorf("held gauge %v after Await, want 0", v)
			}
			if h := r.held.Load(); h != tc.preHeld {
				t.Errorf("held count %d after Await, want %d", h, tc.preHeld)
			}
		})
	}
}

// histCount is the sample count of the wait histogram's series result.
func histCount(t *testing.T, reg *prometheus.Registry, result string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "neuronetes_gateway_session_resume_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestActivityDue(t *testing.T) {
	iv := 10 * time.Second
	now := t0.Add(time.Hour)
	cases := []struct {
		name      string
		v         View
		ok, tried time.Time
		want      bool
	}{
		{name: "running, activity old", v: View{Phase: v1alpha1.SessionRunning, Activity: now.Add(-11 * time.Second)}, want: true},
		{name: "running, activity recent", v: View{Phase: v1alpha1.SessionRunning, Activity: now.Add(-9 * time.Second)}, want: false},
		{name: "running, own write recent though the cache lags", v: View{Phase: v1alpha1.SessionRunning, Activity: now.Add(-time.Minute)},
			ok: now.Add(-5 * time.Second), tried: now.Add(-5 * time.Second), want: false},
		{name: "suspended, no activity after the suspension", v: View{Phase: v1alpha1.SessionSuspended, PhaseSince: now.Add(-2 * time.Second), Activity: now.Add(-3 * time.Second)},
			ok: now.Add(-3 * time.Second), tried: now.Add(-3 * time.Second), want: true},
		{name: "suspended, activity after the suspension already", v: View{Phase: v1alpha1.SessionSuspended, PhaseSince: now.Add(-5 * time.Second), Activity: now.Add(-4 * time.Second)},
			want: false},
		{name: "suspending, written before it began", v: View{Phase: v1alpha1.SessionSuspending, PhaseSince: now.Add(-2 * time.Second)},
			ok: now.Add(-3 * time.Second), tried: now.Add(-3 * time.Second), want: true},
		{name: "suspended, but a try failed just now", v: View{Phase: v1alpha1.SessionSuspended, PhaseSince: now.Add(-2 * time.Second)},
			tried: now.Add(-500 * time.Millisecond), want: false},
		{name: "resuming, recent activity", v: View{Phase: v1alpha1.SessionResuming, PhaseSince: now.Add(-time.Second), Activity: now.Add(-2 * time.Second)}, want: false},
		{name: "pending, never any activity", v: View{Phase: v1alpha1.SessionPending}, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ActivityDue(tc.v, tc.ok, tc.tried, now, iv); got != tc.want {
				t.Errorf("ActivityDue = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAwaitRateLimitsActivity: many requests for a running session write its activity once per
// interval; a failed write is retried after the retry gap, not on every request.
func TestAwaitRateLimitsActivity(t *testing.T) {
	lk := &fakeLookup{views: map[string][]View{"a/s": {running}}}
	rec := &fakeRecorder{}
	clock := t0.Add(time.Hour)
	r := &Router{Lookup: lk, Activity: rec, Now: func() time.Time { return clock }, Cfg: Config{ActivityInterval: 10 * time.Second}}
	for i := 0; i < 5; i++ {
		if _, err := r.Await(context.Background(), "a", "s"); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Second)
	}
	if n := rec.count(); n != 1 {
		t.Fatalf("writes in 5 s: %d, want 1", n)
	}
	clock = clock.Add(6 * time.Second)
	if _, err := r.Await(context.Background(), "a", "s"); err != nil {
		t.Fatal(err)
	}
	if n := rec.count(); n != 2 {
		t.Fatalf("writes after 11 s: %d, want 2", n)
	}
	rec.err = errors.New("forbidden")
	clock = clock.Add(11 * time.Second)
	for i := 0; i < 3; i++ {
		_, _ = r.Await(context.Background(), "a", "s")
	}
	if n := rec.count(); n != 3 {
		t.Fatalf("failed writes tried %d times at one instant, want 1 (total 3)", n-2)
	}
	clock = clock.Add(retryGap)
	_, _ = r.Await(context.Background(), "a", "s")
	if n := rec.count(); n != 4 {
		t.Fatalf("a failed write was not retried after the gap (writes %d)", n)
	}
}

// TestAwaitWakesDespiteClockSkew: a replica whose clock is behind the controller's (now before
// the suspension's transition time) still writes an activity after the suspension, once.
func TestAwaitWakesDespiteClockSkew(t *testing.T) {
	since := t0.Add(time.Hour)
	sus := View{Found: true, Phase: v1alpha1.SessionSuspended, PhaseSince: since, Activity: t0}
	lk := &fakeLookup{views: map[string][]View{"a/s": {sus, sus, sus, running}}}
	rec := &fakeRecorder{}
	clock := since.Add(-5 * time.Second)
	r := &Router{Lookup: lk, Activity: rec, Now: func() time.Time { return clock }, Cfg: Config{Poll: time.Millisecond}}
	if _, err := r.Await(context.Background(), "a", "s"); err != nil {
		t.Fatal(err)
	}
	if len(rec.at) != 1 || !rec.at[0].After(since) {
		t.Fatalf("activity written at %v, want once after the suspension at %v", rec.at, since)
	}
}

func TestWakeTime(t *testing.T) {
	since := t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		v    View
		now  time.Time
		want time.Time
	}{
		{"suspended, clock ahead", View{Phase: v1alpha1.SessionSuspended, PhaseSince: since}, since.Add(time.Second), since.Add(time.Second)},
		{"suspended, clock behind", View{Phase: v1alpha1.SessionSuspended, PhaseSince: since}, since.Add(-time.Second), since.Add(time.Millisecond)},
		{"suspending, same instant", View{Phase: v1alpha1.SessionSuspending, PhaseSince: since}, since, since.Add(time.Millisecond)},
		{"running, clock behind", View{Phase: v1alpha1.SessionRunning, PhaseSince: since}, since.Add(-time.Second), since.Add(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WakeTime(tc.v, tc.now); !got.Equal(tc.want) {
				t.Errorf("WakeTime = %v, want %v", got, tc.want)
			}
		})
	}
}
