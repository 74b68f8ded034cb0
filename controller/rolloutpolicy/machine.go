package rolloutpolicy

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Defaults of the gate and the steps.
const (
	DefaultMinSamples        = 100
	DefaultAlpha             = 0.05
	DefaultTTFTRatio         = 1.2
	DefaultErrorIncrease     = 0.02
	DefaultSafetyIncrease    = 0.02
	DefaultQualityMinSamples = 30
	DefaultQualityDecrease   = 0.05
	DefaultPause             = time.Minute
	DefaultInterval          = 15 * time.Second
)

// Config is a rollout's spec parsed, defaults applied.
type Config struct {
	Gate     GateConfig
	Interval time.Duration
	Pauses   []time.Duration
	Drain    DrainConfig
}

// ParseConfig validates the parts of spec the API schema cannot and applies defaults. Errors
// name the field.
func ParseConfig(spec *nnv1.AgentRolloutSpec) (Config, error) {
	g := spec.Gate
	c := Config{Gate: GateConfig{MinSamples: DefaultMinSamples}}
	if g.MinSamples != nil {
		c.Gate.MinSamples = int64(*g.MinSamples)
	}
	var err error
	if c.Gate.Alpha, err = decimalIn(g.Significance, DefaultAlpha, "spec.gate.significance", 0, 1); err != nil {
		return c, err
	}
	if c.Gate.MaxTTFTRatio, err = decimalIn(g.MaxTTFTRatio, DefaultTTFTRatio, "spec.gate.maxTTFTRatio", 1, 100); err != nil {
		return c, err
	}
	if c.Gate.MaxErrorRateIncrease, err = decimalIn(g.MaxErrorRateIncrease, DefaultErrorIncrease, "spec.gate.maxErrorRateIncrease", 0, 1); err != nil {
		return c, err
	}
	if c.Gate.MaxSafetyBlockRateIncrease, err = decimalIn(g.MaxSafetyBlockRateIncrease, DefaultSafetyIncrease, "spec.gate.maxSafetyBlockRateIncrease", 0, 1); err != nil {
		return c, err
	}
	if q := g.Quality; q != nil {
		c.Gate.QualityMinSamples = DefaultQualityMinSamples
		if q.MinSamples != nil {
			c.Gate.QualityMinSamples = int64(*q.MinSamples)
		}
		if c.Gate.QualityMaxDecrease, err = decimalIn(q.MaxDecrease, DefaultQualityDecrease, "spec.gate.quality.maxDecrease", 0, 1); err != nil {
			return c, err
		}
	}
	if c.Interval, err = duration(g.Interval, DefaultInterval, "spec.gate.interval"); err != nil {
		return c, err
	}
	if c.Drain, err = parseDrain(spec.Drain); err != nil {
		return c, err
	}
	for i, s := range spec.Steps {
		p, err := duration(s.Pause, DefaultPause, fmt.Sprintf("spec.steps[%d].pause", i))
		if err != nil {
			return c, err
		}
		c.Pauses = append(c.Pauses, p)
	}
	if len(spec.Steps) == 0 {
		return c, fmt.Errorf("spec.steps: at least one step is required")
	}
	return c, nil
}

func decimalIn(d nnv1.Decimal, def float64, field string, lo, hi float64) (float64, error) {
	if d == "" {
		return def, nil
	}
	v, err := d.Float64()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	if v < lo || v > hi || (field == "spec.gate.significance" && v == 0) {
		return 0, fmt.Errorf("%s: %s is outside [%g, %g]", field, d, lo, hi)
	}
	return v, nil
}

func duration(d nnv1.Duration, def time.Duration, field string) (time.Duration, error) {
	if d == "" {
		return def, nil
	}
	v, err := d.Parse()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return v, nil
}

// Event is something the reconciler records as a Kubernetes Event on the rollout.
type Event struct {
	// Type is Normal or Warning.
	Type, Reason, Message string
}

// Decide advances a rollout: status is the current status (changed in place), samples those of
// the current step (nil when none could be read), now the time. It returns the Events to
// record. Decide is pure.
func Decide(r *nnv1.AgentRollout, cfg Config, samples *Samples, now time.Time) []Event {
	st := &r.Status
	spec := &r.Spec
	if ev, done := observeSpec(r, now); done {
		if spec.Paused && st.Phase == nnv1.RolloutProgressing {
			hold(r)
		}
		return ev
	}
	if st.Phase == nnv1.RolloutPromoted || st.Phase == nnv1.RolloutRolledBack {
		return nil
	}
	if spec.Paused {
		hold(r)
		return nil
	}
	step := int(st.CurrentStep)
	if st.Phase == nnv1.RolloutPaused {
		setCond(st, nnv1.RolloutConditionProgressing, metav1.ConditionTrue, "Resumed", fmt.Sprintf("resumed on step %d", step), r.Generation)
	}
	st.Phase = nnv1.RolloutProgressing
	cur := spec.Steps[step]
	var out Outcome
	if cur.Weight == 0 && cur.Mirror == 0 {
		out = Outcome{Verdict: Pass, Message: "step sends no traffic to the canary: a timed pause"}
	} else if samples == nil {
		out = Outcome{Verdict: Pending, Message: "no samples could be read from the gateway"}
	} else {
		out = Evaluate(cfg.Gate, samples.Stable, samples.Canary)
		st.Samples = samples.summary()
	}
	st.LastGate = gateResult(out, int32(step), now)
	switch out.Verdict {
	case Fail:
		return rollback(r, out.Message, now)
	case Pass:
		if st.StepStartTime != nil && now.Sub(st.StepStartTime.Time) < cfg.Pauses[step] {
			st.LastGate.Message = fmt.Sprintf("%s; holding until the step's pause ends at %s", out.Message, st.StepStartTime.Add(cfg.Pauses[step]).UTC().Format(time.RFC3339))
			return nil
		}
		ev := []Event{{Type: "Normal", Reason: "StepPassed", Message: fmt.Sprintf("step %d (weight %d, mirror %d) passed: %s", step, cur.Weight, cur.Mirror, out.Message)}}
		return append(ev, enterStep(r, step+1, now)...)
	}
	return nil
}

// hold pauses the rollout on its current step: the split, the run and the step's samples stay.
func hold(r *nnv1.AgentRollout) {
	r.Status.Phase = nnv1.RolloutPaused
	setCond(&r.Status, nnv1.RolloutConditionProgressing, metav1.ConditionFalse, "Paused", "spec.paused is true", r.Generation)
}

// enterStep moves to step i: a step of weight 100, or the end of the steps, promotes.
func enterStep(r *nnv1.AgentRollout, i int, now time.Time) []Event {
	st := &r.Status
	t := metav1.NewTime(now)
	if i >= len(r.Spec.Steps) || r.Spec.Steps[i].Weight >= 100 {
		st.Phase, st.CanaryWeight, st.Mirror = nnv1.RolloutPromoted, 100, 0
		st.CurrentStep = int32(min(i, len(r.Spec.Steps)-1))
		st.StepID, st.StepStartTime = stepID(r.Generation, i), &t
		msg := fmt.Sprintf("all steps passed: every new conversation goes to %s", r.Spec.CanaryPool.Name)
		setCond(st, nnv1.RolloutConditionPromoted, metav1.ConditionTrue, "Promoted", msg, r.Generation)
		setCond(st, nnv1.RolloutConditionProgressing, metav1.ConditionFalse, "Promoted", msg, r.Generation)
		return []Event{{Type: "Normal", Reason: "Promoted", Message: msg}}
	}
	s := r.Spec.Steps[i]
	st.Phase, st.CurrentStep, st.CanaryWeight, st.Mirror = nnv1.RolloutProgressing, int32(i), s.Weight, s.Mirror
	st.StepID, st.StepStartTime, st.Samples = stepID(r.Generation, i), &t, nil
	msg := fmt.Sprintf("step %d: canary weight %d%%, mirror %d%%", i, s.Weight, s.Mirror)
	setCond(st, nnv1.RolloutConditionProgressing, metav1.ConditionTrue, "StepStarted", msg, r.Generation)
	return []Event{{Type: "Normal", Reason: "StepStarted", Message: msg}}
}

func rollback(r *nnv1.AgentRollout, why string, now time.Time) []Event {
	st := &r.Status
	st.Phase, st.CanaryWeight, st.Mirror = nnv1.RolloutRolledBack, 0, 0
	msg := fmt.Sprintf("step %d failed its gate, all traffic back to %s: %s", st.CurrentStep, r.Spec.StablePool.Name, why)
	setCond(st, nnv1.RolloutConditionRolledBack, metav1.ConditionTrue, "GateFailed", msg, r.Generation)
	setCond(st, nnv1.RolloutConditionProgressing, metav1.ConditionFalse, "RolledBack", msg, r.Generation)
	_ = now
	return []Event{{Type: "Warning", Reason: "RolledBack", Message: msg}}
}

func stepID(gen int64, i int) string { return strconv.FormatInt(gen, 10) + "-" + strconv.Itoa(i) }

func setCond(st *nnv1.AgentRolloutStatus, typ string, s metav1.ConditionStatus, reason, msg string, gen int64) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

func gateResult(o Outcome, step int32, now time.Time) *nnv1.GateResult {
	g := &nnv1.GateResult{Time: metav1.NewTime(now), Step: step, Verdict: o.Verdict, Message: o.Message}
	for _, c := range o.Checks {
		g.Checks = append(g.Checks, nnv1.GateCheck{Metric: c.Metric, Stable: dec(c.Stable), Canary: dec(c.Canary),
			PValue: dec(c.PValue), Verdict: c.Verdict, Message: c.Message})
	}
	return g
}

func dec(v float64) nnv1.Decimal {
	if v != v || v > 1e300 || v < -1e300 { // NaN or infinite
		return ""
	}
	return nnv1.Decimal(strconv.FormatFloat(v, 'g', 4, 64))
}

// Samples are both variants' samples on the current step.
type Samples struct {
	Stable, Canary Variant
}

func (s *Samples) summary() *nnv1.RolloutSamples {
	conv := func(v Variant) nnv1.VariantSamples {
		out := nnv1.VariantSamples{Requests: v.Requests, Errors: v.Errors, SafetyBlocks: v.SafetyBlocks,
			QualityCount: int64(v.Quality.Total())}
		if v.TTFT.Total() > 0 {
			out.TTFTP95Seconds = dec(v.TTFT.Quantile(0.95))
		}
		if out.QualityCount > 0 {
			out.QualityMean = dec(v.Quality.Mean())
		}
		return out
	}
	return &nnv1.RolloutSamples{Stable: conv(s.Stable), Canary: conv(s.Canary)}
}
