package scalepolicy

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// adaptivePolicy scales on tokens-per-second with a capacity of 100 per replica
// under a 2 s TTFT SLO held at 99%.
func adaptivePolicy() Policy {
	return Policy{MinReplicas: 1, MaxReplicas: 100,
		Metrics: []MetricSpec{{Type: TokensPerSecond, Target: 100}},
		SLO:     SLOTarget{Enabled: true, TTFT: 2 * time.Second, Adaptive: Adaptive{Enabled: true, Attainment: 0.99}}}
}

// adaptStep is one decision of an adaptive scenario.
type adaptStep struct {
	demand      float64 // pool-wide tokens/s
	ready       int32   // 0: all current replicas are ready
	total, miss float64 // first tokens since the previous decision, and misses among them
	// prefillMiss: the misses are requests whose prefill alone exceeds the
	// SLO (and the margin), known from a prefill-time histogram
	prefillMiss bool
}

// runSteps feeds steps 5 s apart from t0 (first tokens at or under the margin
// unless they miss) and returns the decisions and the final state.
func runSteps(t *testing.T, p Policy, steps []adaptStep) ([]Decision, AdaptiveState) {
	t.Helper()
	a, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	cur := int32(4)
	var ds []Decision
	for i, s := range steps {
		ready := s.ready
		if ready == 0 {
			ready = cur
		}
		c := TTFTCounts{Total: s.total, WithinSLO: s.total - s.miss, WithinMargin: s.total - s.miss}
		if s.prefillMiss {
			c.PrefillKnown, c.PrefillWithinSLO, c.PrefillWithinMargin = true, s.total-s.miss, s.total-s.miss
		}
		in := Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, ReadyReplicas: ready, QueueLag: -1,
			Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: s.demand / float64(ready), Valid: true}}, TTFT: c}
		d := a.Decide(in)
		ds = append(ds, d)
		cur = d.Desired
	}
	return ds, *a.Snapshot().Adaptive
}

func repeat(n int, s adaptStep) []adaptStep {
	out := make([]adaptStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestAdaptiveValidation(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Policy)
		wantErr string
	}{
		{"valid", func(*Policy) {}, ""},
		{"default attainment", func(p *Policy) { p.SLO.Adaptive.Attainment = 0 }, ""},
		{"without the SLO", func(p *Policy) { p.SLO.Enabled = false }, "sloTarget.adaptive"},
		{"attainment of 100%", func(p *Policy) { p.SLO.Adaptive.Attainment = 1 }, "attainmentPercent"},
		{"negative attainment", func(p *Policy) { p.SLO.Adaptive.Attainment = -0.5 }, "attainmentPercent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := adaptivePolicy()
			tc.edit(&p)
			_, err := New(p)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("New: %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestAdaptiveProvisionsHeadroomTimesRememberedPeak(t *testing.T) {
	// 3 minutes at 800 tokens/s (8 replicas of need), then 2 minutes at 200.
	loaded := repeat(36, adaptStep{demand: 800, total: 10})
	ds, st := runSteps(t, adaptivePolicy(), append(loaded, repeat(24, adaptStep{demand: 200, total: 10})...))
	want := int32(math.Ceil(st.Headroom*8 - 1e-9))
	if got := ds[len(ds)-1]; got.Desired != want || got.Reason != ReasonAdaptive {
		t.Fatalf("after the drop the pool holds headroom x the remembered peak: got %d (%s), want %d (%s): %s",
			got.Desired, got.Reason, want, ReasonAdaptive, got.Message)
	}
	// A need above headroom x peak is provisioned at once: never below the demand now.
	ds, _ = runSteps(t, adaptivePolicy(), []adaptStep{{demand: 300}, {demand: 1250}})
	if ds[1].Desired != 13 {
		t.Fatalf("a step to 12.5 replicas of need: got %d, want 13", ds[1].Desired)
	}
}

func TestAdaptiveRaisesOnAnOverspentBudget(t *testing.T) {
	base := repeat(24, adaptStep{demand: 800, total: 20})
	tests := []struct {
		name      string
		steps     []adaptStep
		wantRaise bool
	}{
		{"misses within the budget", append(base, repeat(6, adaptStep{demand: 800, total: 20, miss: 0.05})...), false},
		{"misses over the budget at the target", append(base, repeat(6, adaptStep{demand: 800, total: 20, miss: 5})...), true},
		// The target that was still starting replicas was the headroom's: its
		// misses count (excusing them hid a headroom too low for good).
		{"misses while replicas were still starting", append(repeat(24, adaptStep{demand: 800, total: 20, ready: 2}),
			repeat(6, adaptStep{demand: 800, total: 20, miss: 5, ready: 2})...), true},
		// A request whose prefill alone exceeds the SLO misses under any
		// capacity: not the headroom's miss.
		{"misses caused by prefill alone", append(base, repeat(6, adaptStep{demand: 800, total: 20, miss: 5, prefillMiss: true})...), false},
		// A burst to 3x the peak remembered when the missed requests'
		// capacity was decided is beyond what one raise (e^0.3) answers: the
		// need + backlog term serves it, the headroom stays.
		{"misses of a burst beyond one raise over the remembered peak", append(base, repeat(6, adaptStep{demand: 2400, total: 20, miss: 5})...), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The headroom shrinks with margin: a raise is measured against
			// the state before the misses.
			_, start := runSteps(t, adaptivePolicy(), tc.steps[:24])
			_, st := runSteps(t, adaptivePolicy(), tc.steps)
			raised := st.Headroom > start.Headroom+1e-9 || st.Memory > start.Memory
			if raised != tc.wantRaise {
				t.Fatalf("raised %v, want %v: headroom %.3f memory %s (before the misses %.3f %s)", raised, tc.wantRaise,
					st.Headroom, st.Memory, start.Headroom, start.Memory)
			}
		})
	}
}

func TestAdaptiveRaisesAtMostOncePerSettleTime(t *testing.T) {
	steps := append(repeat(24, adaptStep{demand: 800, total: 20}), repeat(12, adaptStep{demand: 800, total: 20, miss: 20})...)
	_, st := runSteps(t, adaptivePolicy(), steps)
	// 60 s of misses: one raise (settleTime is 90 s), by at most exp(adaptGain).
	if st.Headroom <= initialHeadroom || st.Headroom > initialHeadroom*1.35+1e-9 {
		t.Fatalf("headroom %.3f after 60 s of misses, want one raise of at most exp(%.1f)", st.Headroom, adaptGain)
	}
}

func TestAdaptiveMemoryGrowsWhenAPeakWasForgotten(t *testing.T) {
	p := adaptivePolicy()
	a, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	// A learned memory of 2 minutes, a peak 3 minutes ago, and misses now: a
	// memory twice as long would have held the peak, so the memory grows.
	a.adapt.st.Memory = minMemory
	now := t0.Add(time.Hour)
	for i := range 60 {
		b := a.adapt.bin(now.Add(time.Duration(i-60) * adaptBin))
		b.Need, b.Provision = 2, 2
		if i == 40 {
			b.Need = 10
		}
	}
	a.adapt.st.Last, a.adapt.st.Rate = now.Add(-5*time.Second), 4
	a.Decide(Input{Now: now, CurrentReplicas: 2, QueueLag: -1,
		Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 100, Valid: true}},
		TTFT:    TTFTCounts{Total: 20, WithinSLO: 0}})
	st := a.Snapshot().Adaptive
	if st.Memory <= minMemory || st.Headroom != initialHeadroom {
		t.Fatalf("memory %s headroom %.3f: the memory must grow, not the headroom", st.Memory, st.Headroom)
	}
}

func TestAdaptiveShrinksWithMargin(t *testing.T) {
	tests := []struct {
		name       string
		tail       adaptStep
		wantShrink bool
	}{
		{"loaded, all first tokens within the margin", adaptStep{demand: 800, total: 20}, true},
		// Unconditional on the load: a dip shrinks as a loaded pool does.
		{"in a dip", adaptStep{demand: 400, total: 20}, true},
		// Shrinking needs evidence: without first tokens nothing shrinks.
		{"idle: no first tokens", adaptStep{demand: 800, total: 0}, false},
		{"loaded, but over the budget at the margin", adaptStep{demand: 800, total: 20, miss: -1}, false},
		// Half the requests' prefill alone exceeds the margin: they could not
		// meet it under any capacity, so the margin holds.
		{"over the margin by prefill alone", adaptStep{demand: 800, total: 20, miss: -2}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// 10 minutes loaded, then 500 s of the tail: the loaded bins stay the
			// usual level of the 20-minute memory.
			steps := append(repeat(120, adaptStep{demand: 800, total: 20}), repeat(100, tc.tail)...)
			a, err := New(adaptivePolicy())
			if err != nil {
				t.Fatal(err)
			}
			cur := int32(8)
			var before float64
			for i, s := range steps {
				if i == 122 { // the tail's first decisions, in the 10-minute margin window
					before = a.Snapshot().Adaptive.Headroom
				}
				c := TTFTCounts{Total: s.total, WithinSLO: s.total, WithinMargin: s.total}
				if s.miss < 0 { // within the SLO, but not within the margin
					c.WithinMargin = s.total / 2
				}
				if s.miss == -2 { // ... because their prefill alone exceeds it
					c.PrefillKnown, c.PrefillWithinSLO, c.PrefillWithinMargin = true, s.total, s.total/2
				}
				cur = a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
					Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: s.demand / float64(cur), Valid: true}}, TTFT: c}).Desired
			}
			after := a.Snapshot().Adaptive.Headroom
			if shrunk := after < before-1e-9; shrunk != tc.wantShrink {
				t.Fatalf("headroom %.3f -> %.3f over 500 s: shrink %v, want %v", before, after, shrunk, tc.wantShrink)
			}
		})
	}
}

func TestAdaptiveSnapshotRestore(t *testing.T) {
	steps := append(repeat(30, adaptStep{demand: 900, total: 20}), repeat(20, adaptStep{demand: 900, total: 20, miss: 4})...)
	steps = append(steps, repeat(40, adaptStep{demand: 300, total: 20})...)
	a, err := New(adaptivePolicy())
	if err != nil {
		t.Fatal(err)
	}
	input := func(i int, cur int32) Input {
		s := steps[i%len(steps)]
		return Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
			Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: s.demand / float64(cur), Valid: true}},
			TTFT:    TTFTCounts{Total: s.total, WithinSLO: s.total - s.miss, WithinMargin: s.total - s.miss}}
	}
	cur := int32(4)
	for i := range 60 {
		cur = a.Decide(input(i, cur)).Desired
	}
	raw, err := json.Marshal(a.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	b, _ := New(adaptivePolicy())
	b.Restore(st)
	if !reflect.DeepEqual(a.Snapshot().Adaptive, b.Snapshot().Adaptive) {
		t.Fatalf("restored state differs:\n%+v\n%+v", a.Snapshot().Adaptive, b.Snapshot().Adaptive)
	}
	fresh, _ := New(adaptivePolicy())
	ca, cb, cf := cur, cur, cur
	same, freshSame := true, true
	for i := 60; i < len(steps)+30; i++ {
		da, db, df := a.Decide(input(i, ca)), b.Decide(input(i, cb)), fresh.Decide(input(i, cf))
		same = same && da.Desired == db.Desired
		freshSame = freshSame && da.Desired == df.Desired
		ca, cb, cf = da.Desired, db.Desired, df.Desired
	}
	if !same {
		t.Fatal("the restored autoscaler decided differently from the original")
	}
	if freshSame {
		t.Fatal("a fresh autoscaler decided as the original: the scenario does not exercise the learned state")
	}
}

func TestAdaptiveBacklogIsNotRemembered(t *testing.T) {
	p := adaptivePolicy()
	p.Metrics = append(p.Metrics, MetricSpec{Type: TokensInQueue, Target: 100})
	a, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(i int, demand, queued float64) Decision {
		return a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: 4, QueueLag: -1,
			Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: demand / 4, Valid: true}, TokensInQueue: {Value: queued / 4, Valid: true}}})
	}
	decide(0, 400, 0)
	// 400 tokens/s of rate need (4 replicas) and 600 queued tokens (6 replicas to drain): 10.
	if d := decide(1, 400, 600); d.Desired != 10 {
		t.Fatalf("with a backlog: %d, want 10 (%s)", d.Desired, d.Message)
	}
	// Drained: back to the remembered rate need alone.
	if d := decide(2, 400, 0); d.Desired != 4 {
		t.Fatalf("after the backlog drained: %d, want 4 (%s)", d.Desired, d.Message)
	}
}

func TestAdaptiveSizesFromOfferedDemand(t *testing.T) {
	// After a burst the servers flush a backlog: they process 1,600 tokens/s
	// (16 replicas at the target) while 400 tokens/s arrive. Sized from the
	// offered prompt tokens, the flush is not demand.
	tests := []struct {
		name    string
		offered OfferedDemand
		want    int32
	}{
		{"processed tokens (no gateway view)", OfferedDemand{}, 16},
		{"offered prompt tokens", OfferedDemand{Valid: true, PromptTokensPerSecond: 400}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(adaptivePolicy())
			if err != nil {
				t.Fatal(err)
			}
			d := a.Decide(Input{Now: t0, CurrentReplicas: 16, QueueLag: -1, Offered: tc.offered,
				Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 100, Valid: true}}})
			if d.Desired != tc.want {
				t.Fatalf("got %d, want %d: %s", d.Desired, tc.want, d.Message)
			}
		})
	}
}

func TestAdaptiveShrinkEvidenceInALastingDip(t *testing.T) {
	// 10 minutes at 4 first tokens/s, then 500 s at 0.6/s (15%), all within
	// the margin. The evidence is measured against the rate usual over the
	// shrink's time constant: the dip shrinks the headroom far slower than
	// the same time at the usual load, though it lasts longer than the
	// first-token rate's smoothing.
	shrinkOver := func(tail adaptStep) float64 {
		steps := append(repeat(120, adaptStep{demand: 800, total: 20}), repeat(100, tail)...)
		a, err := New(adaptivePolicy())
		if err != nil {
			t.Fatal(err)
		}
		cur := int32(8)
		var before float64
		for i, s := range steps {
			if i == 120 {
				before = a.Snapshot().Adaptive.Headroom
			}
			cur = a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
				Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: s.demand / float64(cur), Valid: true}},
				TTFT:    TTFTCounts{Total: s.total, WithinSLO: s.total, WithinMargin: s.total}}).Desired
		}
		return math.Log(before / a.Snapshot().Adaptive.Headroom)
	}
	loaded, dip := shrinkOver(adaptStep{demand: 800, total: 20}), shrinkOver(adaptStep{demand: 120, total: 3})
	if loaded <= 0 || dip > 0.3*loaded {
		t.Fatalf("log shrink over 500 s: loaded %.3f, in the dip %.3f (want under 30%% of loaded)", loaded, dip)
	}
}

func TestAdaptiveShrinkEvidenceOfBurstyTraffic(t *testing.T) {
	// The same first tokens, all within the margin, steady (5 per decision)
	// or in bursts (20 in one decision of four, none in the others): each
	// first token is the same evidence, so over 15 minutes both shrink the
	// headroom alike. (Capped at the usual rate per decision, the bursts
	// counted a quarter: bursty traffic hardly shrank a raise.)
	shrinkOver := func(burst bool) float64 {
		a, err := New(adaptivePolicy())
		if err != nil {
			t.Fatal(err)
		}
		cur := int32(8)
		for i := range 180 {
			total := 5.0
			if burst {
				total = 0
				if i%4 == 0 {
					total = 20
				}
			}
			cur = a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
				Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 800 / float64(cur), Valid: true}},
				TTFT:    TTFTCounts{Total: total, WithinSLO: total, WithinMargin: total}}).Desired
		}
		return math.Log(initialHeadroom / a.Snapshot().Adaptive.Headroom)
	}
	steady, bursty := shrinkOver(false), shrinkOver(true)
	if steady <= 0 || bursty < 0.9*steady {
		t.Fatalf("log shrink over 15 min: steady %.3f, bursty %.3f (want at least 90%% of steady)", steady, bursty)
	}
}

func TestAdaptiveRemembersOfferedDemandNotAFlush(t *testing.T) {
	// After a burst the backlog flushes: 10 sequences run per replica on 4
	// replicas (10 replicas of need at the sessions target 4) while 400
	// offered tokens/s need 4. The flush is served now; the peak remembered
	// is the offered one.
	p := adaptivePolicy()
	p.Metrics = append(p.Metrics, MetricSpec{Type: ConcurrentSessions, Target: 4})
	tests := []struct {
		name    string
		offered OfferedDemand
		// want: the flush's decision, and the next one once the flush ended
		wantFlush, wantAfter int32
	}{
		// Without a gateway view the running sequences are all the demand
		// known: the flush's need is remembered.
		{"no offered demand", OfferedDemand{}, 10, 10},
		{"offered demand measured", OfferedDemand{Valid: true, PromptTokensPerSecond: 400}, 10, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			decide := func(i int, sessions float64) Decision {
				return a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: 4, QueueLag: -1, Offered: tc.offered,
					Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 100, Valid: true}, ConcurrentSessions: {Value: sessions, Valid: true}}})
			}
			decide(0, 1)
			if d := decide(1, 10); d.Desired != tc.wantFlush {
				t.Fatalf("during the flush: %d, want %d (%s)", d.Desired, tc.wantFlush, d.Message)
			}
			if d := decide(2, 1); d.Desired != tc.wantAfter {
				t.Fatalf("after the flush: %d, want %d (%s)", d.Desired, tc.wantAfter, d.Message)
			}
		})
	}
}

// TestAdaptiveHoldsTheRecentNeedWhateverTheHeadroom: a headroom learned
// down to its bound (a load that had kept the margin) must not remove the
// replicas the load of the last minute needed on one quiet decision: they
// would be a cold start away when it goes on (synthetic-dip-4: 3 -> 2 after
// the dip, 191 misses).
func TestAdaptiveHoldsTheRecentNeedWhateverTheHeadroom(t *testing.T) {
	a, err := New(adaptivePolicy())
	if err != nil {
		t.Fatal(err)
	}
	a.Restore(State{Adaptive: &AdaptiveState{Headroom: minHeadroom, Memory: minMemory}})
	cur := int32(3)
	decide := func(i int, demand float64) Decision {
		d := a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
			Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: demand / float64(cur), Valid: true}},
			TTFT:    TTFTCounts{Total: 10, WithinSLO: 10, WithinMargin: 10}})
		cur = d.Desired
		return d
	}
	for i := range 12 { // a minute at 3 replicas of need
		decide(i, 300)
	}
	if d := decide(12, 100); d.Desired != 3 {
		t.Fatalf("one quiet decision after a minute at 3 replicas of need (headroom %.2f): got %d, want 3: %s",
			minHeadroom, d.Desired, d.Message)
	}
}

// TestAdaptiveRaisesWhenARememberedLoadReturns: a load that comes back after
// a dip to a level the memory holds is no unforeseeable burst, however far
// above the provision a low headroom left: its misses raise the headroom
// (synthetic-dip-12).
func TestAdaptiveRaisesWhenARememberedLoadReturns(t *testing.T) {
	a, err := New(adaptivePolicy())
	if err != nil {
		t.Fatal(err)
	}
	a.Restore(State{Adaptive: &AdaptiveState{Headroom: 0.5, Memory: initialMemory}})
	cur, i := int32(8), 0
	run := func(n int, demand, miss float64) {
		for range n {
			d := a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
				Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: demand / float64(cur), Valid: true}},
				TTFT:    TTFTCounts{Total: 20, WithinSLO: 20 - miss, WithinMargin: 20 - miss}})
			cur, i = d.Desired, i+1
		}
	}
	run(24, 800, 0) // 2 minutes at 8 replicas of need: the remembered peak
	run(36, 200, 0) // a 3-minute dip: the pool holds 0.5 x 8 = 4
	before := a.Snapshot().Adaptive.Headroom
	run(6, 800, 5) // the load returns, 2x the provision, within the peak
	if after := a.Snapshot().Adaptive.Headroom; after <= before {
		t.Fatalf("misses of a load returning to the remembered peak: headroom %.3f -> %.3f, want a raise", before, after)
	}
}

func TestAdaptiveHoldsARecurringPeakForTheMemory(t *testing.T) {
	// A need of 2 for the last hour of 10 s bins, with bursts (bins ago:
	// need); the memory is 20 minutes and the headroom 1, so the pool holds
	// the peak the memory keeps. A burst older than adaptPeriod (60 bins)
	// counts only when its level (within e^adaptGain) came back more than
	// startupLag (6 bins) away from it, anywhere in the history.
	tests := []struct {
		name   string
		bursts map[int]float64
		want   int32
	}{
		{"no burst", nil, 2},
		{"a burst seen once, 12 minutes ago", map[int]float64{72: 10}, 2},
		{"a burst seen once, 5 minutes ago", map[int]float64{30: 10}, 10},
		{"a burst whose level came back 18 minutes ago", map[int]float64{72: 10, 108: 8}, 10},
		{"a burst whose level came back before the memory", map[int]float64{72: 10, 210: 9}, 10},
		{"a burst whose level came back within a cold start is one burst", map[int]float64{72: 10, 75: 9}, 2},
		{"a lesser burst whose level came back is held", map[int]float64{72: 10, 84: 6, 180: 5}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(adaptivePolicy())
			if err != nil {
				t.Fatal(err)
			}
			now := t0.Add(2 * time.Hour)
			for i := 360; i > 0; i-- {
				b := a.adapt.bin(now.Add(-time.Duration(i) * adaptBin))
				b.Need, b.Provision = 2, 2
				if v, ok := tc.bursts[i]; ok {
					b.Need = v
				}
			}
			a.adapt.st.Last, a.adapt.st.Rate = now.Add(-5*time.Second), 4
			d := a.Decide(Input{Now: now, CurrentReplicas: 2, QueueLag: -1,
				Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 100, Valid: true}},
				TTFT:    TTFTCounts{Total: 20, WithinSLO: 20, WithinMargin: 20}})
			if d.Desired != tc.want {
				t.Fatalf("desired %d, want %d: %s", d.Desired, tc.want, d.Message)
			}
		})
	}
}
