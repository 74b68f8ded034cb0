package rolloutpolicy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestFisherGreater(t *testing.T) {
	cases := []struct {
		aBad, aN, bBad, bN int64
		want               float64
	}{
		{3, 4, 1, 4, 0.24286},           // Fisher's tea tasting, one-sided
		{10, 10, 0, 10, 5.4125e-6},      // all bad vs none: 1/C(20,10)
		{0, 10, 5, 10, 1},               // canary better
		{50, 1000, 50, 1000, 0.54083},   // equal shares
		{30, 1000, 10, 1000, 0.0010042}, // 3% vs 1% (exact, by math.comb)
	}
	for _, c := range cases {
		got := FisherGreater(c.aBad, c.aN, c.bBad, c.bN)
		if math.Abs(got-c.want) > 0.02*c.want+1e-7 {
			t.Errorf("FisherGreater(%d/%d vs %d/%d) = %.5g, want %.5g", c.aBad, c.aN, c.bBad, c.bN, got, c.want)
		}
	}
}

// hist draws n samples of f into histogram buckets.
func hist(bounds []float64, n int, f func() float64) Histogram {
	h := Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	for i := 0; i < n; i++ {
		v := f()
		j := 0
		for j < len(bounds)-1 && v > bounds[j] {
			j++
		}
		h.Counts[j]++
		h.Sum += v
	}
	return h
}

var ttftBounds = func() []float64 {
	var b []float64
	for v := 0.005; v < 30; v *= 1.25 {
		b = append(b, v)
	}
	return append(b, math.Inf(1))
}()

var qualityBounds = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, math.Inf(1)}

func variant(r *rand.Rand, n int, errRate, ttftMean, quality float64) Variant {
	v := Variant{Requests: int64(n)}
	for i := 0; i < n; i++ {
		if r.Float64() < errRate {
			v.Errors++
		}
	}
	v.TTFT = hist(ttftBounds, n-int(v.Errors), func() float64 { return ttftMean * (0.5 + r.ExpFloat64()*0.5) })
	if quality > 0 {
		v.Quality = hist(qualityBounds, n/4, func() float64 { return math.Min(1, math.Max(0, quality+r.NormFloat64()*0.15)) })
	}
	return v
}

func TestGateOnSyntheticSamples(t *testing.T) {
	cfg := GateConfig{MinSamples: 200, Alpha: 0.05, MaxTTFTRatio: 1.2, MaxErrorRateIncrease: 0.02,
		MaxSafetyBlockRateIncrease: 0.02, QualityMinSamples: 30, QualityMaxDecrease: 0.05}
	cases := []struct {
		name        string
		stable      func(*rand.Rand) Variant
		canary      func(*rand.Rand) Variant
		want        string
		failsMetric string
	}{
		{"healthy canary passes",
			func(r *rand.Rand) Variant { return variant(r, 1000, 0.01, 0.2, 0.8) },
			func(r *rand.Rand) Variant { return variant(r, 400, 0.01, 0.2, 0.8) }, Pass, ""},
		{"erroring canary fails",
			func(r *rand.Rand) Variant { return variant(r, 1000, 0.01, 0.2, 0.8) },
			func(r *rand.Rand) Variant { return variant(r, 400, 0.3, 0.2, 0.8) }, Fail, "errorRate"},
		{"slow canary fails",
			func(r *rand.Rand) Variant { return variant(r, 1000, 0.01, 0.2, 0.8) },
			func(r *rand.Rand) Variant { return variant(r, 400, 0.01, 0.5, 0.8) }, Fail, "ttftP95"},
		{"worse quality fails",
			func(r *rand.Rand) Variant { return variant(r, 1000, 0.01, 0.2, 0.8) },
			func(r *rand.Rand) Variant { return variant(r, 400, 0.01, 0.2, 0.6) }, Fail, "quality"},
		{"few samples is pending",
			func(r *rand.Rand) Variant { return variant(r, 1000, 0.01, 0.2, 0.8) },
			func(r *rand.Rand) Variant { return variant(r, 40, 0.01, 0.2, 0.8) }, Pending, ""},
		{"early abort on a broken canary",
			func(r *rand.Rand) Variant { return variant(r, 1000, 0.01, 0.2, 0.8) },
			func(r *rand.Rand) Variant { return variant(r, 60, 0.9, 0.2, 0.8) }, Fail, "errorRate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			o := Evaluate(cfg, c.stable(r), c.canary(r))
			if o.Verdict != c.want {
				t.Fatalf("verdict %s (%s), want %s", o.Verdict, o.Message, c.want)
			}
			if c.failsMetric != "" {
				found := false
				for _, ch := range o.Checks {
					found = found || ch.Metric == c.failsMetric && ch.Verdict == Fail
				}
				if !found {
					t.Fatalf("%s did not fail: %+v", c.failsMetric, o.Checks)
				}
			}
		})
	}
}

// TestGateFalseRollbackRate runs the gate on 300 pairs of identical variants: the share of
// false failures must stay near alpha's order (the practical margin keeps it far below).
func TestGateFalseRollbackRate(t *testing.T) {
	cfg := GateConfig{MinSamples: 200, Alpha: 0.05, MaxTTFTRatio: 1.2, MaxErrorRateIncrease: 0.02, MaxSafetyBlockRateIncrease: 0.02}
	r := rand.New(rand.NewPCG(7, 9))
	fails := 0
	for i := 0; i < 300; i++ {
		if Evaluate(cfg, variant(r, 500, 0.02, 0.2, 0), variant(r, 250, 0.02, 0.2, 0)).Verdict == Fail {
			fails++
		}
	}
	if fails > 9 {
		t.Fatalf("%d of 300 identical pairs failed the gate", fails)
	}
}

func rollout(steps ...nnv1.RolloutStep) *nnv1.AgentRollout {
	r := &nnv1.AgentRollout{Spec: nnv1.AgentRolloutSpec{StablePool: nnv1.LocalObjectReference{Name: "v1"},
		CanaryPool: nnv1.LocalObjectReference{Name: "v2"}, Steps: steps}}
	r.Generation = 1
	return r
}

func TestStepMachine(t *testing.T) {
	r := rollout(nnv1.RolloutStep{Weight: 0, Mirror: 50, Pause: "1m"}, nnv1.RolloutStep{Weight: 20, Pause: "1m"}, nnv1.RolloutStep{Weight: 100})
	r.Spec.Gate.MinSamples = ptr(int32(100))
	cfg, err := ParseConfig(&r.Spec)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_000_000, 0)
	rnd := rand.New(rand.NewPCG(3, 4))
	healthy := &Samples{Stable: variant(rnd, 500, 0.01, 0.2, 0), Canary: variant(rnd, 300, 0.01, 0.2, 0)}

	ev := Decide(r, cfg, nil, t0)
	if r.Status.Phase != nnv1.RolloutProgressing || r.Status.Mirror != 50 || r.Status.CanaryWeight != 0 || r.Status.StepID != "1-0" || len(ev) != 2 {
		t.Fatalf("start: %+v %v", r.Status, ev)
	}
	Decide(r, cfg, healthy, t0.Add(30*time.Second))
	if r.Status.CurrentStep != 0 || r.Status.LastGate.Verdict != Pass {
		t.Fatalf("a passing gate waits for the pause: %+v", r.Status)
	}
	Decide(r, cfg, healthy, t0.Add(61*time.Second))
	if r.Status.CurrentStep != 1 || r.Status.CanaryWeight != 20 || r.Status.Mirror != 0 || r.Status.StepID != "1-1" {
		t.Fatalf("advance: %+v", r.Status)
	}
	Decide(r, cfg, &Samples{Stable: healthy.Stable, Canary: variant(rnd, 20, 0, 0.2, 0)}, t0.Add(130*time.Second))
	if r.Status.CurrentStep != 1 || r.Status.LastGate.Verdict != Pending {
		t.Fatalf("pending: %+v", r.Status.LastGate)
	}
	ev = Decide(r, cfg, healthy, t0.Add(200*time.Second))
	if r.Status.Phase != nnv1.RolloutPromoted || r.Status.CanaryWeight != 100 || ev[len(ev)-1].Reason != "Promoted" {
		t.Fatalf("promote: %+v %v", r.Status, ev)
	}
	if c := findCond(r.Status.Conditions, nnv1.RolloutConditionPromoted); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Promoted condition: %+v", r.Status.Conditions)
	}
	if Decide(r, cfg, healthy, t0.Add(300*time.Second)) != nil {
		t.Fatal("a promoted rollout is final")
	}
}

func TestRollbackAndRestart(t *testing.T) {
	r := rollout(nnv1.RolloutStep{Weight: 10, Pause: "1m"}, nnv1.RolloutStep{Weight: 50})
	r.Spec.Gate.MinSamples = ptr(int32(100))
	cfg, _ := ParseConfig(&r.Spec)
	t0 := time.Unix(1_000_000, 0)
	rnd := rand.New(rand.NewPCG(5, 6))
	Decide(r, cfg, nil, t0)
	ev := Decide(r, cfg, &Samples{Stable: variant(rnd, 500, 0.01, 0.2, 0), Canary: variant(rnd, 150, 0.4, 0.2, 0)}, t0.Add(10*time.Second))
	if r.Status.Phase != nnv1.RolloutRolledBack || r.Status.CanaryWeight != 0 || len(ev) != 1 || ev[0].Type != "Warning" {
		t.Fatalf("rollback: %+v %v", r.Status, ev)
	}
	if c := findCond(r.Status.Conditions, nnv1.RolloutConditionRolledBack); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("RolledBack condition: %+v", r.Status.Conditions)
	}
	r.Generation = 2 // a new generation that changes nothing but paused is no retry
	r.Spec.Paused = true
	Decide(r, cfg, nil, t0.Add(30*time.Minute))
	if r.Status.Phase != nnv1.RolloutRolledBack || r.Status.Run != 1 {
		t.Fatalf("pausing a rolled-back rollout restarted it: %+v", r.Status)
	}
	r.Generation, r.Spec.Paused = 3, false
	r.Spec.Steps[0].Pause = "2m" // the user fixed the canary and edited the spec: a retry
	Decide(r, cfg, nil, t0.Add(time.Hour))
	if r.Status.Phase != nnv1.RolloutProgressing || r.Status.StepID != "3-0" || r.Status.Run != 2 || findCond(r.Status.Conditions, nnv1.RolloutConditionRolledBack) != nil {
		t.Fatalf("restart: %+v", r.Status)
	}
	r.Spec.Paused = true
	Decide(r, cfg, nil, t0.Add(2*time.Hour))
	if r.Status.Phase != nnv1.RolloutPaused || r.Status.CanaryWeight != 10 {
		t.Fatalf("pause keeps the split: %+v", r.Status)
	}
}

// TestPauseAndEditKeepProgress: pausing, resuming and editing the gate keep the run, the step and
// its samples; editing the current step's weight re-enters it in the same run; removing steps
// clamps; only a new pool (a new revision) starts a new run from step 0.
func TestPauseAndEditKeepProgress(t *testing.T) {
	r := rollout(nnv1.RolloutStep{Weight: 0, Mirror: 50, Pause: "1m"}, nnv1.RolloutStep{Weight: 20, Pause: "1m"},
		nnv1.RolloutStep{Weight: 50, Pause: "1m"}, nnv1.RolloutStep{Weight: 100})
	r.Spec.Gate.MinSamples = ptr(int32(100))
	cfg, _ := ParseConfig(&r.Spec)
	t0 := time.Unix(1_000_000, 0)
	rnd := rand.New(rand.NewPCG(7, 8))
	healthy := &Samples{Stable: variant(rnd, 500, 0.01, 0.2, 0), Canary: variant(rnd, 300, 0.01, 0.2, 0)}
	Decide(r, cfg, nil, t0)
	Decide(r, cfg, healthy, t0.Add(61*time.Second))
	if r.Status.CurrentStep != 1 || r.Status.StepID != "1-1" || r.Status.Run != 1 {
		t.Fatalf("advance: %+v", r.Status)
	}
	started := r.Status.StepStartTime
	type want struct {
		phase      nnv1.RolloutPhase
		step       int32
		id         string
		run        int64
		weight     int32
		keepsStart bool
	}
	for i, c := range []struct {
		name string
		edit func(*nnv1.AgentRolloutSpec)
		want want
	}{
		{"pause", func(s *nnv1.AgentRolloutSpec) { s.Paused = true }, want{nnv1.RolloutPaused, 1, "1-1", 1, 20, true}},
		{"edit gate while paused", func(s *nnv1.AgentRolloutSpec) { s.Gate.MaxTTFTRatio = "1.5" }, want{nnv1.RolloutPaused, 1, "1-1", 1, 20, true}},
		{"resume", func(s *nnv1.AgentRolloutSpec) { s.Paused = false }, want{nnv1.RolloutProgressing, 1, "1-1", 1, 20, true}},
		{"edit a later step", func(s *nnv1.AgentRolloutSpec) { s.Steps[2].Weight = 60 }, want{nnv1.RolloutProgressing, 1, "1-1", 1, 20, true}},
		{"edit the current step", func(s *nnv1.AgentRolloutSpec) { s.Steps[1].Weight = 30 }, want{nnv1.RolloutProgressing, 1, "6-1", 1, 30, false}},
		{"remove steps", func(s *nnv1.AgentRolloutSpec) { s.Steps = s.Steps[:1] }, want{nnv1.RolloutProgressing, 0, "7-0", 1, 0, false}},
		{"new canary pool", func(s *nnv1.AgentRolloutSpec) { s.CanaryPool.Name = "v3" }, want{nnv1.RolloutProgressing, 0, "8-0", 2, 0, false}},
	} {
		r.Generation++
		c.edit(&r.Spec)
		cfg, _ = ParseConfig(&r.Spec)
		Decide(r, cfg, healthy, t0.Add(time.Duration(62+i)*time.Second))
		st := r.Status
		got := want{st.Phase, st.CurrentStep, st.StepID, st.Run, st.CanaryWeight, st.StepStartTime.Equal(started)}
		if got != c.want {
			t.Fatalf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		if p := findCond(st.Conditions, nnv1.RolloutConditionProgressing); p == nil || (p.Status == metav1.ConditionTrue) != (st.Phase == nnv1.RolloutProgressing) {
			t.Fatalf("%s: Progressing condition %+v in phase %s", c.name, p, st.Phase)
		}
		started = st.StepStartTime
	}
}

func TestParseConfigNamesFields(t *testing.T) {
	r := rollout(nnv1.RolloutStep{Weight: 10})
	r.Spec.Gate.Significance = "1.5"
	if _, err := ParseConfig(&r.Spec); err == nil || !contains(err.Error(), "spec.gate.significance") {
		t.Fatalf("%v", err)
	}
	r.Spec.Gate.Significance = ""
	r.Spec.Steps[0].Pause = "soon"
	if _, err := ParseConfig(&r.Spec); err == nil || !contains(err.Error(), "spec.steps[0].pause") {
		t.Fatalf("%v", err)
	}
	r.Spec.Steps[0].Pause = ""
	r.Spec.Drain = &nnv1.RolloutDrain{Timeout: "later"}
	if _, err := ParseConfig(&r.Spec); err == nil || !contains(err.Error(), "spec.drain.timeout") {
		t.Fatalf("%v", err)
	}
}

// TestDrain: a promoted rollout keeps its stable conversations on the old pool until the drain
// timeout, then is Drained (every request to the canary) and scales the old pool down once,
// unless scaleDown is false; other phases never drain.
func TestDrain(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name      string
		phase     nnv1.RolloutPhase
		drain     *nnv1.RolloutDrain
		drained   bool
		after     time.Duration
		want      DrainDecision
		wantDrain bool
	}{
		{"progressing", nnv1.RolloutProgressing, nil, false, time.Hour, DrainDecision{}, false},
		{"rolled back", nnv1.RolloutRolledBack, nil, false, time.Hour, DrainDecision{}, false},
		{"before the default timeout", nnv1.RolloutPromoted, nil, false, 20 * time.Minute, DrainDecision{RequeueAfter: 10 * time.Minute}, false},
		{"at the default timeout", nnv1.RolloutPromoted, nil, false, 30 * time.Minute, DrainDecision{ScaleDown: "v1"}, true},
		{"own timeout", nnv1.RolloutPromoted, &nnv1.RolloutDrain{Timeout: "5m"}, false, 5 * time.Minute, DrainDecision{ScaleDown: "v1"}, true},
		{"no scale-down", nnv1.RolloutPromoted, &nnv1.RolloutDrain{ScaleDown: ptr(false)}, false, time.Hour, DrainDecision{}, true},
		{"already drained", nnv1.RolloutPromoted, nil, true, 2 * time.Hour, DrainDecision{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rollout(nnv1.RolloutStep{Weight: 100})
			r.Spec.Drain = c.drain
			start := metav1.NewTime(t0)
			r.Status = nnv1.AgentRolloutStatus{Phase: c.phase, StepStartTime: &start, Drained: c.drained}
			cfg, err := ParseConfig(&r.Spec)
			if err != nil {
				t.Fatal(err)
			}
			d, ev := Drain(r, cfg, t0.Add(c.after))
			if d != c.want || r.Status.Drained != c.wantDrain {
				t.Fatalf("got %+v drained %v, want %+v drained %v", d, r.Status.Drained, c.want, c.wantDrain)
			}
			if fresh := c.wantDrain && !c.drained; fresh != (len(ev) == 1) || fresh != (findCond(r.Status.Conditions, nnv1.RolloutConditionDrained) != nil) {
				t.Fatalf("events %v conditions %+v", ev, r.Status.Conditions)
			}
		})
	}
}

func contains(s, sub string) bool { return indexOf(s, sub) >= 0 }
func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func ptr[T any](v T) *T { return &v }

func findCond(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

func TestHistogramQuantileAndAbove(t *testing.T) {
	h := Histogram{Bounds: []float64{1, 2, 4, math.Inf(1)}, Counts: []float64{10, 10, 0, 0}}
	if q := h.Quantile(0.5); q != 1 {
		t.Fatalf("median %v", q)
	}
	if q := h.Quantile(0.75); q != 1.5 {
		t.Fatalf("p75 %v", q)
	}
	if a := h.Above(1); a != 10 {
		t.Fatalf("above 1: %v", a)
	}
	if p := MannWhitneyLess(Histogram{Bounds: h.Bounds, Counts: []float64{20, 0, 0, 0}}, h); p > 0.01 {
		t.Fatalf("lower sample: p=%v", p)
	}
}
