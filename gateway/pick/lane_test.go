package pick

import (
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// TestBacklogDeductsHeadProgress walks a pod's lane on a fake clock: the rate is learnt from a
// first token, then the oldest pending request's progress is deducted from the backlog.
func TestBacklogDeductsHeadProgress(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	l := NewLoad()
	l.Now = func() time.Time { return now }
	at := func(d time.Duration) { now = t0.Add(d) }
	backlog := func() int { return l.Backlog(pool, "p") }

	a := l.Acquire(pool, "p", 0, 1000)
	if got := backlog(); got != 1000 {
		t.Fatalf("no rate learnt yet: backlog %d, want 1000", got)
	}
	at(time.Second)
	a.FirstToken() // 1000 tokens in 1 s
	if got := backlog(); got != 0 {
		t.Fatalf("after the first token: backlog %d, want 0", got)
	}
	tiny := l.Acquire(pool, "p", 0, 10) // a cached prompt: its time is overhead, not prefill
	at(1500 * time.Millisecond)
	tiny.FirstToken()
	at(2 * time.Second)
	b := l.Acquire(pool, "p", 0, 2000)
	l.Acquire(pool, "p", 0, 500)
	steps := []struct {
		at   time.Duration
		want int
	}{
		{2 * time.Second, 2500},
		{2500 * time.Millisecond, 2000}, // the head computed 500 at 1000 tokens/s
		{4200 * time.Millisecond, 300},  // the head is done by the rate (its first token is late); the next began at 4 s
		{5 * time.Second, 0},
	}
	for _, s := range steps {
		at(s.at)
		if got := backlog(); got != s.want {
			t.Errorf("at %s: backlog %d, want %d", s.at, got, s.want)
		}
	}
	b.Release() // ended without a first token: it teaches no rate
	if r := l.lanes[podKey{pool, "p"}].rate.tokensPerSecond(); r != 1000 {
		t.Errorf("rate %v, want 1000 (from the one real prefill)", r)
	}
}

// TestLaneBacklog is the lane schedule's decision table: requests run one after another from the
// lane's free time at the rate, each not before it was sent.
func TestLaneBacklog(t *testing.T) {
	t0 := time.Unix(0, 0)
	le := func(sentMs, prefill int) *Lease {
		return &Lease{sent: t0.Add(time.Duration(sentMs) * time.Millisecond), prefill: prefill}
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name  string
		queue []*Lease
		free  time.Time
		now   time.Time
		rate  float64
		want  int
	}{
		{"no rate: everything pending", []*Lease{le(0, 100), le(0, 200)}, t0, at(1000), 0, 300},
		{"empty", nil, t0, at(5), 1000, 0},
		{"head half done", []*Lease{le(0, 1000), le(0, 1000)}, t0, at(500), 1000, 1500},
		{"head done, second half done", []*Lease{le(0, 1000), le(0, 1000)}, t0, at(1500), 1000, 500},
		{"all done by the schedule", []*Lease{le(0, 1000), le(0, 1000)}, t0, at(2500), 1000, 0},
		{"a later send starts later", []*Lease{le(0, 100), le(1000, 1000)}, t0, at(1200), 1000, 800},
		{"the lane was busy until its last first token", []*Lease{le(0, 1000)}, at(400), at(500), 1000, 900},
		{"not sent yet by now (a clock step)", []*Lease{le(900, 1000)}, t0, at(500), 1000, 1000},
	}
	for _, c := range cases {
		if got := laneBacklog(c.queue, c.free, c.now, c.rate); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestRateIgnoresQueuedBursts: first tokens of queued requests arriving in a burst (a gateway
// starved of CPU reads them late, together) must not make the pod look infinitely fast.
func TestRateIgnoresQueuedBursts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	l := NewLoad()
	l.Now = func() time.Time { return now }
	a := l.Acquire(pool, "p", 0, 1000)
	b := l.Acquire(pool, "p", 0, 5000)
	c := l.Acquire(pool, "p", 0, 5000)
	now = t0.Add(time.Second)
	a.FirstToken()
	now = now.Add(500 * time.Microsecond)
	b.FirstToken()
	now = now.Add(500 * time.Microsecond)
	c.FirstToken()
	if r := l.lanes[podKey{pool, "p"}].rate.tokensPerSecond(); r != 1000 {
		t.Fatalf("rate %v, want 1000 (only the request that found the lane idle)", r)
	}
	d := l.Acquire(pool, "p", 0, 4000)
	now = now.Add(time.Second)
	if got := l.Backlog(pool, "p"); got != 3000 {
		t.Fatalf("backlog %d, want 3000 (1 s of progress at 1000 tokens/s)", got)
	}
	d.Release()
}

// TestForgetLanes: the lane of a pod that left the pool goes with its learnt rate, unless it
// still has a pending request; the lanes of routable pods and of other pools stay.
func TestForgetLanes(t *testing.T) {
	other := pool
	other.Name += "-other"
	now := time.Unix(1000, 0)
	l := NewLoad()
	l.Now = func() time.Time { return now }
	learn := func(p route.PoolRef, pod string) {
		le := l.Acquire(p, pod, 0, 100)
		now = now.Add(time.Second) // 100 tokens/s learnt
		le.FirstToken()
		le.Release()
	}
	learn(pool, "stays")
	learn(pool, "gone")
	learn(other, "gone")
	pending := l.Acquire(pool, "busy", 0, 100)
	l.ForgetLanes(pool, map[string]bool{"stays": true})
	for _, tc := range []struct {
		k    podKey
		want bool
	}{
		{podKey{pool, "stays"}, true},
		{podKey{pool, "gone"}, false},
		{podKey{pool, "busy"}, true},
		{podKey{other, "gone"}, true},
	} {
		if _, ok := l.lanes[tc.k]; ok != tc.want {
			t.Errorf("lane %v kept %v, want %v", tc.k, ok, tc.want)
		}
	}
	pending.Release()
	l.ForgetLanes(pool, map[string]bool{"stays": true})
	if _, ok := l.lanes[podKey{pool, "busy"}]; ok {
		t.Error("the lane of a pod that left outlived its last request")
	}
}

// TestBacklogAtEngineRate: a rate from the engine's metrics replaces the one learnt from first
// tokens (which the network and request intake slow down); 0 falls back to the learnt one.
func TestBacklogAtEngineRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	l := NewLoad()
	l.Now = func() time.Time { return now }
	a := l.Acquire(pool, "p", 0, 1000)
	now = t0.Add(time.Second)
	a.FirstToken() // learnt: 1000 tokens/s
	l.Acquire(pool, "p", 0, 4000)
	now = t0.Add(2 * time.Second) // one second of the 4000 computed
	cases := []struct {
		name      string
		engine    float64
		want      int
		wantRate  float64
		wantRoute route.PoolRef
	}{
		{"learnt rate", 0, 3000, 1000, pool},
		{"the engine's rate", 3000, 1000, 3000, pool},
		{"the engine's rate computes it all", 5000, 0, 5000, pool},
	}
	for _, c := range cases {
		got, rate := l.BacklogAt(c.wantRoute, "p", c.engine)
		if got != c.want || rate != c.wantRate {
			t.Errorf("%s: backlog %d at %v tokens/s, want %d at %v", c.name, got, rate, c.want, c.wantRate)
		}
	}
	if got, rate := l.BacklogAt(pool, "unknown", 3000); got != 0 || rate != 3000 {
		t.Errorf("a pod with no lane: %d at %v", got, rate)
	}
}

// TestLateFirstTokenFreesLaneOnSchedule: a first token seen after the lane's schedule (at the
// engine's rate) ended that prefill frees the lane at the scheduled end, so the request behind it
// is counted from then; one seen before the scheduled end frees it when seen.
func TestLateFirstTokenFreesLaneOnSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name    string
		seen    time.Duration // A's first token seen
		engine  float64       // the engine's rate (0: none, nothing learnt either)
		at      time.Duration
		backlog int
	}{
		{"seen late: B started at A's scheduled end (1 s)", 1500 * time.Millisecond, 1000, 1500 * time.Millisecond, 1500},
		{"seen early: the lane was free when seen", 500 * time.Millisecond, 1000, 500 * time.Millisecond, 2000},
		{"seen early, later: B counted from when A was seen", 500 * time.Millisecond, 1000, 1500 * time.Millisecond, 1000},
		{"no rate known: nothing is deducted", 1500 * time.Millisecond, 0, 1500 * time.Millisecond, 2000},
	}
	for _, c := range cases {
		now := t0
		l := NewLoad()
		l.Now = func() time.Time { return now }
		a := l.Acquire(pool, "p", 0, 1000)
		l.Acquire(pool, "p", 0, 2000)
		l.BacklogAt(pool, "p", c.engine) // the engine's rate, as a pick passes it
		now = t0.Add(c.seen)
		a.FirstToken()
		now = t0.Add(c.at)
		if got, _ := l.BacklogAt(pool, "p", c.engine); got != c.backlog {
			t.Errorf("%s: backlog %d, want %d", c.name, got, c.backlog)
		}
	}
}

// TestQueuedFloor: the engine's waiting count floors a pod's backlog at the uncached tokens of
// this replica's newest pending requests there, however much the lane schedule says is computed.
func TestQueuedFloor(t *testing.T) {
	l := NewLoad()
	for _, u := range []int{100, 200, 300, 400} {
		l.Acquire(pool, "p", 0, u)
	}
	for _, c := range []struct {
		name    string
		pod     string
		waiting int
		want    int
	}{
		{"nothing waiting", "p", 0, 0},
		{"the newest one", "p", 1, 400},
		{"the newest three", "p", 3, 900},
		{"more waiting than this replica has pending: all of its own", "p", 9, 1000},
		{"a pod with no lane", "q", 5, 0},
	} {
		if got := l.QueuedFloor(pool, c.pod, c.waiting); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestPickEngineQueueFloor: a pod that the lane schedule (at a fast engine rate) counts as idle
// but whose engine reports requests waiting (its batch slots full) loses to a pod that is idle.
func TestPickEngineQueueFloor(t *testing.T) {
	p := testPool(2)
	t0 := time.Unix(1000, 0)
	now := t0
	for _, waiting := range []float64{0, 3} {
		l := NewLoad()
		l.Now = func() time.Time { return now }
		sc := &Scraper{Now: l.Now}
		rate := ServerMetrics{HasPrefill: true, PromptTokens: 1e6, PrefillSeconds: 1, At: t0}
		for _, ep := range p.Endpoints {
			sc.Set(ep.MetricsURL, rate)
		}
		busy := rate
		busy.Waiting, busy.HasQueue = waiting, true
		sc.Set(p.Endpoints[0].MetricsURL, busy)
		pk := &Picker{Load: l, Metrics: sc}
		for range 3 {
			l.Acquire(pool, "pod-0", 0, 500)
		}
		// pod-1 has as many requests, decoding (past their first tokens): the in-flight counts tie.
		for range 3 {
			l.Acquire(pool, "pod-1", 0, 500).FirstToken()
		}
		now = t0.Add(time.Second) // at 1e6 tokens/s the lane schedule has computed everything
		ch, _ := pk.Pick(p, Input{PromptTokens: 500})
		want := "pod-0" // the name breaks the tie of two empty lanes and equal loads
		if waiting > 0 {
			want = "pod-1"
		}
		if ch.Pod != want {
			t.Errorf("engine waiting %v: picked %s, want %s", waiting, ch.Pod, want)
		}
		now = t0
	}
}
