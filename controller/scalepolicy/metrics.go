package scalepolicy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// poolWide reports whether a metric is a pool-wide value rather than a
// per-replica average; pool-wide metrics give no signal at zero replicas.
func poolWide(t MetricType) bool { return t == TTFTP95 || t == ContextLength }

// effectiveMetrics returns the configured metrics plus, when the SLO target is
// enabled (neither breach-only nor adaptive) and no ttft-p95 metric is
// configured, the implicit one at TTFT*(1-headroom).
func (p Policy) effectiveMetrics() []MetricSpec {
	ms := p.Metrics
	if !p.SLO.Enabled || p.SLO.BreachOnly || p.SLO.Adaptive.Enabled {
		return ms
	}
	for _, m := range ms {
		if m.Type == TTFTP95 {
			return ms
		}
	}
	t := p.SLO.TTFT.Seconds() * (1 - p.SLO.HeadroomPercent/100)
	return append(append([]MetricSpec(nil), ms...), MetricSpec{Type: TTFTP95, Target: t})
}

// metricRecommendation turns the metric ratios into a replica count, the HPA
// way: ratio = current/target per metric, combined by the strategy, no change
// within the tolerance, desired = ceil(ratio*readyReplicas). Missing metrics are
// left out; if any is missing, a scale-down is not taken (the HPA's rule), and
// with none at all the count is held.
func (a *Autoscaler) metricRecommendation(in Input, ratios map[MetricType]float64) (int32, Reason, string) {
	p := a.policy
	cur := in.CurrentReplicas
	specs := p.effectiveMetrics()
	if len(specs) == 0 {
		return cur, ReasonNoMetrics, "no metrics configured"
	}
	base := in.ReadyReplicas
	if base <= 0 {
		base = cur
	}
	if base == 0 {
		// Scaled to zero: per-replica metrics are totals; activate by demand.
		var want int32
		for _, m := range specs {
			v, ok := in.Metrics[m.Type]
			if !ok || !v.Valid || poolWide(m.Type) {
				continue
			}
			want = max(want, int32(math.Ceil(v.Value/m.Target-1e-9)))
		}
		return want, ReasonMetrics, fmt.Sprintf("at zero replicas, demand wants %d", want)
	}
	var vals []float64
	var seen []string
	missing := 0
	for _, m := range specs {
		v, ok := in.Metrics[m.Type]
		if !ok || !v.Valid || math.IsNaN(v.Value) {
			missing++
			seen = append(seen, fmt.Sprintf("%s missing", m.Type))
			continue
		}
		r := v.Value / m.Target
		ratios[m.Type] = r
		vals = append(vals, r)
		seen = append(seen, fmt.Sprintf("%s %.3g/%.3g", m.Type, v.Value, m.Target))
	}
	detail := strings.Join(seen, ", ")
	if len(vals) == 0 {
		return cur, ReasonNoMetrics, "all metrics missing or stale: hold"
	}
	r := combine(p.Strategy, vals)
	if math.Abs(r-1) <= p.Tolerance {
		return cur, ReasonWithinTolerance, fmt.Sprintf("%s: ratio %.2f within tolerance %.2f", detail, r, p.Tolerance)
	}
	want := int32(math.Ceil(r*float64(base) - 1e-9))
	if missing > 0 && want < cur {
		return cur, ReasonMissingMetrics, fmt.Sprintf("%s: ratio %.2f wants %d but %d metric(s) missing: no scale-down", detail, r, want, missing)
	}
	return want, ReasonMetrics, fmt.Sprintf("%s: %s ratio %.2f wants %d", detail, p.Strategy, r, want)
}

func combine(s Strategy, vals []float64) float64 {
	out := vals[0]
	switch s {
	case StrategyMin:
		for _, v := range vals[1:] {
			out = math.Min(out, v)
		}
	case StrategyAverage:
		sum := 0.0
		for _, v := range vals {
			sum += v
		}
		out = sum / float64(len(vals))
	default:
		for _, v := range vals[1:] {
			out = math.Max(out, v)
		}
	}
	return out
}

// trackSLO updates the scale-down safety clock and reports an SLO breach
// (ttft-p95 above the SLO itself, not the headroom target).
func (a *Autoscaler) trackSLO(in Input) bool {
	s := a.policy.SLO
	if !s.Enabled {
		return false
	}
	v, ok := in.Metrics[TTFTP95]
	if !ok || !v.Valid {
		a.safeSince = time.Time{}
		return false
	}
	safeBelow := s.TTFT.Seconds() * (1 - s.RequireHeadroomPercent/100)
	if v.Value <= safeBelow {
		if a.safeSince.IsZero() {
			a.safeSince = in.Now
		}
	} else {
		a.safeSince = time.Time{}
	}
	return v.Value > s.TTFT.Seconds()
}

// scaleDownSafe reports whether the SLO allows a scale-down now: always when the
// SLO target or its safety check is off; otherwise ttft-p95 must have stayed
// within the required headroom for CheckDuration.
func (a *Autoscaler) scaleDownSafe(now time.Time) bool {
	s := a.policy.SLO
	if !s.Enabled || (s.RequireHeadroomPercent == 0 && s.CheckDuration == 0) {
		return true
	}
	return !a.safeSince.IsZero() && now.Sub(a.safeSince) >= s.CheckDuration
}

// lagReplicas applies the seed's queue formula:
//
//	additional = ceil((lag - current*prefetch) / (prefetch*targetThroughput))
//
// Above maxLagThreshold the pool wants current+additional (additional >= 0).
// At or below it, the pool wants enough replicas to hold the lag in their
// prefetch buffers, ceil(lag/prefetch), so an idle queue lets the pool shrink.
func lagReplicas(q QueueLag, lag int64, cur int32) int32 {
	if lag > q.MaxLagThreshold {
		add := math.Ceil(float64(lag-int64(cur)*q.PrefetchCount) / (float64(q.PrefetchCount) * q.TargetThroughput))
		return cur + int32(max(add, 0))
	}
	return int32(math.Ceil(float64(lag) / float64(q.PrefetchCount)))
}

// capacityMetric reports whether a metric measures demand on replica capacity
// (so that value/target x replicas is the replicas the demand needs); TTFT
// and context length do not.
func capacityMetric(t MetricType) bool { return t != TTFTP95 && t != ContextLength }

// backlogMetric reports whether a metric measures work already waiting
// (queued requests or prompt tokens) rather than a rate of demand.
func backlogMetric(t MetricType) bool { return t == TokensInQueue || t == QueueDepth }

// demand is the adaptive policy's need, in replicas at the metric targets:
// rate is the configured rate metrics' ratios (capacity metrics other than
// the backlog ones), combined by the strategy, times the reporting replicas
// (at zero replicas the per-replica values are pool totals), without the
// tolerance's dead band; backlog is the same over the backlog metrics, the
// replicas that would drain the waiting work within its target. ok is false
// when no capacity metric is valid.
func (a *Autoscaler) demand(in Input, ratios map[MetricType]float64) (rate, backlog float64, ok bool, detail string) {
	base := float64(in.ReadyReplicas)
	if base <= 0 {
		base = float64(in.CurrentReplicas)
	}
	var rates, backlogs []float64
	var seen []string
	for _, m := range a.policy.Metrics {
		v, valid := in.Metrics[m.Type]
		if !capacityMetric(m.Type) || !valid || !v.Valid || math.IsNaN(v.Value) {
			continue
		}
		if m.Type == TokensPerSecond && in.Offered.Valid {
			continue // sized from the offered prompt tokens below
		}
		target := a.demandTarget(m)
		r := v.Value / target
		ratios[m.Type] = r
		if backlogMetric(m.Type) {
			backlogs = append(backlogs, r)
		} else {
			rates = append(rates, r)
		}
		seen = append(seen, fmt.Sprintf("%s %.3g/%.3g", m.Type, v.Value, target))
	}
	offered, haveOffered := a.offeredNeed(in)
	if len(rates)+len(backlogs) == 0 && !haveOffered {
		return 0, 0, false, "no capacity metric valid: hold"
	}
	base = max(base, 1)
	if haveOffered {
		// A pool total in replicas: per replica, as the other ratios are.
		rates = append(rates, offered/base)
		ratios[TokensPerSecond] = offered / base
		seen = append(seen, fmt.Sprintf("offered prompt tokens/s %.4g (%.2f replicas)", in.Offered.PromptTokensPerSecond, offered))
	}
	if len(rates) > 0 {
		rate = combine(a.policy.Strategy, rates) * base
	}
	if len(backlogs) > 0 {
		backlog = combine(a.policy.Strategy, backlogs) * base
	}
	return rate, backlog, true, strings.Join(seen, ", ")
}

// demandTarget is the per-replica target the adaptive policy divides a
// metric by: the configured one, except that with the learned capacity
// model the tokens-in-queue target is at least the queue one replica drains
// within the slack the SLO leaves (CapacityModel.QueueDrain). Queued
// requests may wait that slack, so the backlog asks for the replicas that
// drain the queue within it; the configured target still bounds what the
// backlog asks when the slack is shorter. (Measured on Mooncake synthetic,
// SLO 97.7 s: the queue drained over half the SLO held 26,372
// replica-seconds, over the 60 s of slack 25,870 at the same attainment.)
func (a *Autoscaler) demandTarget(m MetricSpec) float64 {
	if m.Type != TokensInQueue || a.adapt == nil || a.adapt.capacity == nil {
		return m.Target
	}
	if d, ok := a.adapt.capacity.QueueDrain(); ok && d > m.Target {
		return d
	}
	return m.Target
}

// adaptiveRecommendation is the adaptive policy's raw recommendation: the
// learned headroom x the peak rate need within the learned memory, and at
// least the highest mean need of the last minute and the rate need now plus
// the replicas that drain the backlog.
func (a *Autoscaler) adaptiveRecommendation(in Input, ratios map[MetricType]float64) (int32, Reason, string) {
	if cm := a.adapt.capacity; cm != nil {
		cm.Observe(in.Now, in.Capacity, in.Offered.PromptTokensPerSecond, in.Offered.Valid)
	}
	rate, backlog, ok, detail := a.demand(in, ratios)
	logged := rate
	if off, ok := a.offeredNeed(in); ok {
		logged = off
	}
	target := a.adapt.decide(in, rate, logged, backlog, a.drainSeconds(), ok)
	if !ok {
		return in.CurrentReplicas, ReasonNoMetrics, detail
	}
	st := a.adapt.st
	want := int32(math.Ceil(target - 1e-9))
	return want, ReasonAdaptive, fmt.Sprintf("%s: need %.2f + backlog %.2f; headroom %.2f x the peak need of the last %s, at least the last minute's need, wants %d",
		detail, rate, backlog, st.Headroom, st.Memory.Round(time.Second), want)
}

// metricTarget is the target of the first metric of type t (0: none).
func (p Policy) metricTarget(t MetricType) float64 {
	for _, m := range p.Metrics {
		if m.Type == t {
			return m.Target
		}
	}
	return 0
}

// offeredNeed is the replicas the offered prompt tokens need at the
// tokens-per-second target (one replica's throughput); ok is false when the
// offered load is not measured or no tokens-per-second metric is configured.
func (a *Autoscaler) offeredNeed(in Input) (float64, bool) {
	if !in.Offered.Valid {
		return 0, false
	}
	if a.adapt != nil && a.adapt.capacity != nil {
		// The learned capacity model: the replicas that serve the offered
		// prompt tokens within the SLO.
		if n, ok := a.adapt.capacity.Need(in.Now); ok {
			return n, true
		}
	}
	for _, m := range a.policy.Metrics {
		if m.Type == TokensPerSecond && m.Target > 0 {
			return in.Offered.PromptTokensPerSecond / m.Target, true
		}
	}
	return 0, false
}

// drainSeconds is the time the tokens-in-queue backlog is drained over: its
// target over one replica's prefill rate (0: no tokens-in-queue metric or no
// capacity model).
func (a *Autoscaler) drainSeconds() float64 {
	if a.adapt.capacity == nil {
		return 0
	}
	tps, _ := a.adapt.capacity.PrefillTPS()
	for _, m := range a.policy.Metrics {
		if m.Type == TokensInQueue && tps > 0 {
			return a.demandTarget(m) / tps
		}
	}
	return 0
}
