package scalepolicy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// DefaultTolerance is the HPA's default tolerance.
const DefaultTolerance = 0.1

// Autoscaler decides serving replica counts for one pool. It keeps the history
// that stabilization, change policies, cooldown, the SLO safety check, the
// forecaster and the cron floors need. It is not safe for concurrent use; the
// caller serializes Decide calls (one goroutine per pool).
type Autoscaler struct {
	policy Policy
	// recs holds raw recommendations, oldest first, pruned to the longest
	// stabilization window.
	recs []timedValue
	// events holds applied scale changes (signed), oldest first, pruned to the
	// longest policy period.
	events []timedValue
	// lastScale is the time of the last applied change (zero: never);
	// prevLastScale the one before, for Unapply.
	lastScale, prevLastScale time.Time
	// safeSince is when ttft-p95 last entered the scale-down safety band (zero: not in it).
	safeSince time.Time
	crons     []*cronState
	forecast  *Forecaster
	// adapt is the SLO adaptation (nil unless SLO.Adaptive.Enabled).
	adapt *adapter
}

type timedValue struct {
	t time.Time
	v float64
}

// New validates p, fills defaults and returns an Autoscaler.
func New(p Policy) (*Autoscaler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.withDefaults()
	a := &Autoscaler{policy: p}
	for i, s := range p.Predictive.Schedules {
		cs, err := newCronState(s)
		if err != nil {
			return nil, fmt.Errorf("predictive.schedules[%d].cron: %w", i, err)
		}
		a.crons = append(a.crons, cs)
	}
	if p.Predictive.Enabled {
		a.forecast = NewForecaster(p.Predictive.Season, p.Predictive.LookbackWindow, p.Predictive.Horizon)
	}
	if p.SLO.Adaptive.Enabled {
		a.adapt = newAdapter(p.SLO, p.metricTarget(TokensPerSecond))
	}
	return a, nil
}

// Policy returns the policy with defaults applied.
func (a *Autoscaler) Policy() Policy { return a.policy }

// Validate checks p and names the first bad field.
func (p Policy) Validate() error {
	if p.MinReplicas < 0 {
		return fmt.Errorf("minReplicas: must be >= 0, got %d", p.MinReplicas)
	}
	if p.MaxReplicas < p.MinReplicas || p.MaxReplicas <= 0 {
		return fmt.Errorf("maxReplicas: must be >= minReplicas (%d) and > 0, got %d", p.MinReplicas, p.MaxReplicas)
	}
	for i, m := range p.Metrics {
		if m.Target <= 0 {
			return fmt.Errorf("metrics[%d].target: must be > 0, got %v", i, m.Target)
		}
		if !knownMetric(m.Type) {
			return fmt.Errorf("metrics[%d].type: unknown metric %q", i, m.Type)
		}
	}
	switch p.Strategy {
	case "", StrategyMax, StrategyMin, StrategyAverage:
	default:
		return fmt.Errorf("strategy: must be max, min or average, got %q", p.Strategy)
	}
	if p.Tolerance < 0 || p.Tolerance >= 1 {
		return fmt.Errorf("tolerance: must be in [0,1), got %v", p.Tolerance)
	}
	for name, r := range map[string]ScalingRules{"behavior.scaleUp": p.Behavior.ScaleUp, "behavior.scaleDown": p.Behavior.ScaleDown} {
		if r.MaxChangePercent < 0 || r.MaxChangeAbsolute < 0 || r.StabilizationWindow < 0 || r.Period < 0 {
			return fmt.Errorf("%s: limits and windows must be >= 0", name)
		}
		switch r.Select {
		case "", SelectMin, SelectMax, SelectDisabled:
		default:
			return fmt.Errorf("%s.select: unknown %q", name, r.Select)
		}
	}
	if p.SLO.Enabled && p.SLO.TTFT <= 0 {
		return fmt.Errorf("sloTarget.ttft: must be > 0 when sloTarget.enabled")
	}
	if p.SLO.Adaptive.Enabled && !p.SLO.Enabled {
		return fmt.Errorf("sloTarget.adaptive: needs sloTarget.enabled and the AgentClass spec.slo.ttft")
	}
	if err := p.SLO.Adaptive.validate(); err != nil {
		return err
	}
	if p.SLO.HeadroomPercent < 0 || p.SLO.HeadroomPercent >= 100 || p.SLO.RequireHeadroomPercent < 0 || p.SLO.RequireHeadroomPercent >= 100 {
		return fmt.Errorf("sloTarget.headroomPercent/requireHeadroom: must be in [0,100)")
	}
	if c := p.Predictive.MinConfidence; c < 0 || c > 1 {
		return fmt.Errorf("predictive.minConfidence: must be in [0,1], got %v", c)
	}
	if p.Predictive.Enabled && p.Predictive.Horizon <= 0 {
		return fmt.Errorf("predictive.horizonMinutes: must be > 0 when predictive.enabled")
	}
	if p.Cost.CostPerReplicaHour < 0 || p.Cost.MaxCostPerHour < 0 || p.Cost.DailyBudget < 0 {
		return fmt.Errorf("costConstraints: prices and budgets must be >= 0")
	}
	for i, act := range p.Cost.OnBudgetExceeded {
		switch act {
		case ActionScaleToMin, ActionUseFallbackModel, ActionEnableSpot:
		default:
			return fmt.Errorf("costConstraints.onBudgetExceeded[%d]: unknown action %q", i, act)
		}
	}
	if p.Lag.Enabled && p.Lag.PrefetchCount <= 0 {
		return fmt.Errorf("queueConfig.prefetchCount: must be > 0 when autoscaleOnLag")
	}
	return nil
}

// ExternalPrefix prefixes external metric types ("external:<name>"); their
// values are per-replica averages of an external query, like KEDA's AverageValue.
const ExternalPrefix = "external:"

func knownMetric(t MetricType) bool {
	if strings.HasPrefix(string(t), ExternalPrefix) && len(t) > len(ExternalPrefix) {
		return true
	}
	for _, k := range AllMetricTypes {
		if k == t {
			return true
		}
	}
	return false
}

func (p Policy) withDefaults() Policy {
	if p.Strategy == "" {
		p.Strategy = StrategyMax
	}
	if p.Tolerance == 0 {
		p.Tolerance = DefaultTolerance
	}
	if p.Lag.TargetThroughput <= 0 {
		p.Lag.TargetThroughput = 1
	}
	if p.Predictive.LookbackWindow <= 0 {
		p.Predictive.LookbackWindow = 7 * 24 * time.Hour
	}
	if p.Predictive.Season == 0 {
		p.Predictive.Season = 24 * time.Hour
	}
	return p
}

// Decide evaluates one input and records the outcome in the Autoscaler's history.
// Invariant: the returned Desired is within [MinReplicas, MaxReplicas] unless a
// budget cap or scale-to-min action lowers it (never below MinReplicas).
func (a *Autoscaler) Decide(in Input) Decision {
	p := a.policy
	now := in.Now
	cur := in.CurrentReplicas
	d := Decision{Current: cur, Ratios: map[MetricType]float64{}}
	var why []string

	if in.Override != nil {
		d.Desired, d.Reason = in.Override.Replicas, ReasonOverride
		why = append(why, fmt.Sprintf("override to %d (%s)", in.Override.Replicas, in.Override.Reason))
		d.Raw = d.Desired
		a.finish(&d, in, why)
		return d
	}

	var raw int32
	var reason Reason
	var msg string
	if a.adapt != nil {
		raw, reason, msg = a.adaptiveRecommendation(in, d.Ratios)
	} else {
		raw, reason, msg = a.metricRecommendation(in, d.Ratios)
	}
	why = append(why, msg)
	breach := a.trackSLO(in)

	if p.Lag.Enabled && in.QueueLag >= 0 {
		if lr := lagReplicas(p.Lag, in.QueueLag, cur); lr > raw || len(p.effectiveMetrics()) == 0 {
			raw, reason = lr, ReasonQueueLag
			why = append(why, fmt.Sprintf("queue lag %d wants %d", in.QueueLag, lr))
		}
	}
	if a.forecast != nil {
		a.forecast.Observe(now, float64(raw))
		if f, conf, ok := a.forecast.Predict(now); ok && conf >= p.Predictive.MinConfidence {
			if fr := int32(math.Ceil(f - 1e-9)); fr > raw {
				raw, reason = fr, ReasonPredictive
				why = append(why, fmt.Sprintf("forecast %.1f in %s (confidence %.2f)", f, p.Predictive.Horizon, conf))
			}
		}
	}
	if floor, name := a.scheduleFloor(now); floor > raw {
		raw, reason = floor, ReasonSchedule
		why = append(why, fmt.Sprintf("schedule %s sets floor %d", name, floor))
	}
	raw = clamp(raw, p.MinReplicas, p.MaxReplicas)
	d.Raw = raw
	a.recs = append(a.recs, timedValue{now, float64(raw)})
	a.pruneRecs(now)

	desired := raw
	fast := breach && p.SLO.ScaleUpImmediately && raw > cur
	if fast {
		if p.SLO.MaxScaleUp > 0 && desired > cur+p.SLO.MaxScaleUp {
			desired = cur + p.SLO.MaxScaleUp
		}
		reason = ReasonSLOBreach
		why = append(why, fmt.Sprintf("ttft-p95 above SLO %s: fast path", p.SLO.TTFT))
	} else {
		if st := a.stabilize(now, cur); st != desired {
			desired, reason = st, ReasonStabilized
			why = append(why, fmt.Sprintf("stabilized to %d", st))
		}
		if lim := a.limitByPolicies(now, cur, desired); lim != desired {
			desired, reason = lim, ReasonPolicyLimit
			why = append(why, fmt.Sprintf("change policy limits to %d", lim))
		}
		if desired != cur && p.CooldownPeriod > 0 && !a.lastScale.IsZero() && now.Sub(a.lastScale) < p.CooldownPeriod {
			desired, reason = cur, ReasonCooldown
			why = append(why, fmt.Sprintf("cooldown until %s", a.lastScale.Add(p.CooldownPeriod).Format(time.RFC3339)))
		}
	}
	if desired < cur && !a.scaleDownSafe(now) {
		desired, reason = cur, ReasonScaleDownUnsafe
		why = append(why, "ttft-p95 not within scale-down headroom long enough")
	}
	d.Desired, d.Reason = desired, reason
	a.finish(&d, in, why)
	return d
}

// finish applies bounds and budget, records the change and splits warm/cold.
func (a *Autoscaler) finish(d *Decision, in Input, why []string) {
	p := a.policy
	if b := clamp(d.Desired, p.MinReplicas, p.MaxReplicas); b != d.Desired {
		d.Desired, d.Reason = b, ReasonBounds
		why = append(why, fmt.Sprintf("bounded to [%d,%d]", p.MinReplicas, p.MaxReplicas))
	}
	if capN, ok := costCap(p.Cost, in.WarmReplicas, in.PricePerReplicaHour); ok && d.Desired > capN && d.Desired > in.CurrentReplicas {
		c := max(capN, min(in.CurrentReplicas, d.Desired), p.MinReplicas)
		if c != d.Desired {
			d.Desired, d.Reason = c, ReasonBudget
			why = append(why, fmt.Sprintf("maxCostPerHour %.2f caps serving replicas at %d", p.Cost.MaxCostPerHour, capN))
		}
	}
	if p.Cost.DailyBudget > 0 && in.SpentToday >= p.Cost.DailyBudget {
		d.Actions = append(d.Actions, p.Cost.OnBudgetExceeded...)
		for _, act := range p.Cost.OnBudgetExceeded {
			if act == ActionScaleToMin && d.Desired != p.MinReplicas {
				d.Desired, d.Reason = p.MinReplicas, ReasonBudget
				why = append(why, fmt.Sprintf("daily budget %.2f spent (%.2f): scale to min", p.Cost.DailyBudget, in.SpentToday))
			}
		}
	}
	if d.Desired != in.CurrentReplicas {
		a.events = append(a.events, timedValue{in.Now, float64(d.Desired - in.CurrentReplicas)})
		a.prevLastScale, a.lastScale = a.lastScale, in.Now
	}
	if up := d.Desired - in.CurrentReplicas; up > 0 {
		d.FromWarm = min(up, max(in.WarmReplicas, 0))
		d.Cold = up - d.FromWarm
	}
	d.Message = fmt.Sprintf("%d -> %d: %s", d.Current, d.Desired, strings.Join(why, "; "))
}

// Unapply tells the Autoscaler that the change of d, its latest decision, was
// not applied (the write failed): it no longer counts against the change
// policies or the cooldown. Decisions without a change are ignored.
func (a *Autoscaler) Unapply(d Decision) {
	if !d.Changed() || len(a.events) == 0 {
		return
	}
	last := a.events[len(a.events)-1]
	if last.v != float64(d.Desired-d.Current) || !last.t.Equal(a.lastScale) {
		return
	}
	a.events = a.events[:len(a.events)-1]
	a.lastScale = a.prevLastScale
}

func clamp(v, lo, hi int32) int32 {
	return max(lo, min(v, hi))
}
