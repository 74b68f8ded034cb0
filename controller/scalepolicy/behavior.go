package scalepolicy

import (
	"math"
	"time"
)

// pruneRecs drops recommendations older than the longest stabilization window.
func (a *Autoscaler) pruneRecs(now time.Time) {
	w := max(a.policy.Behavior.ScaleUp.StabilizationWindow, a.policy.Behavior.ScaleDown.StabilizationWindow)
	i := 0
	for i < len(a.recs)-1 && now.Sub(a.recs[i].t) > w {
		i++
	}
	a.recs = a.recs[i:]
}

// stabilize applies the HPA's stabilization: the scale-up recommendation is the
// minimum, and the scale-down recommendation the maximum, of the raw
// recommendations within the respective window (the latest one included).
func (a *Autoscaler) stabilize(now time.Time, cur int32) int32 {
	b := a.policy.Behavior
	up, down := math.Inf(1), math.Inf(-1)
	for _, r := range a.recs {
		age := now.Sub(r.t)
		if age <= b.ScaleUp.StabilizationWindow {
			up = math.Min(up, r.v)
		}
		if age <= b.ScaleDown.StabilizationWindow {
			down = math.Max(down, r.v)
		}
	}
	out := cur
	if float64(out) < up {
		out = int32(up)
	}
	if float64(out) > down {
		out = int32(down)
	}
	return out
}

// limitByPolicies caps the change by maxChangePercent/maxChangeAbsolute per
// period, counting the changes already applied within the period (the HPA's
// algorithm, with Select choosing the most restrictive or permissive limit).
func (a *Autoscaler) limitByPolicies(now time.Time, cur, desired int32) int32 {
	b := a.policy.Behavior
	if desired > cur {
		r := b.ScaleUp
		if r.Select == SelectDisabled {
			return cur
		}
		added, removed := a.changesWithin(now, r.Period)
		start := float64(cur - added + removed)
		lim, ok := pick(r, []float64{
			pctOr(r.MaxChangePercent, math.Ceil(start*(1+r.MaxChangePercent/100))),
			absOr(r.MaxChangeAbsolute, start+float64(r.MaxChangeAbsolute)),
		}, true)
		if ok && float64(desired) > lim {
			return max(cur, int32(lim))
		}
		return desired
	}
	if desired < cur {
		r := b.ScaleDown
		if r.Select == SelectDisabled {
			return cur
		}
		added, removed := a.changesWithin(now, r.Period)
		start := float64(cur + removed - added)
		lim, ok := pick(r, []float64{
			// Floored as the HPA does (int32 truncation): a ceiling would make
			// any percentage under 100/start a no-op on small pools.
			pctOr(r.MaxChangePercent, math.Floor(start*(1-r.MaxChangePercent/100)+1e-9)),
			absOr(r.MaxChangeAbsolute, start-float64(r.MaxChangeAbsolute)),
		}, false)
		if ok && float64(desired) < lim {
			return min(cur, int32(lim))
		}
	}
	return desired
}

// pctOr and absOr return NaN for a disabled (zero) limit.
func pctOr(p, v float64) float64 {
	if p == 0 {
		return math.NaN()
	}
	return v
}

func absOr(n int32, v float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return v
}

// pick chooses among the enabled limits: for scale-up the most restrictive is the
// smallest bound, for scale-down the largest.
func pick(r ScalingRules, lims []float64, up bool) (float64, bool) {
	restrictive := r.Select != SelectMax
	best, ok := 0.0, false
	for _, l := range lims {
		if math.IsNaN(l) {
			continue
		}
		if !ok {
			best, ok = l, true
			continue
		}
		if up == restrictive {
			best = math.Min(best, l)
		} else {
			best = math.Max(best, l)
		}
	}
	return best, ok
}

// changesWithin sums the replicas added and removed by changes within period,
// pruning events older than the longest period.
func (a *Autoscaler) changesWithin(now time.Time, period time.Duration) (added, removed int32) {
	keep := max(a.policy.Behavior.ScaleUp.Period, a.policy.Behavior.ScaleDown.Period)
	i := 0
	for i < len(a.events) && now.Sub(a.events[i].t) > keep {
		i++
	}
	a.events = a.events[i:]
	for _, e := range a.events {
		if now.Sub(e.t) > period {
			continue
		}
		if e.v > 0 {
			added += int32(e.v)
		} else {
			removed += int32(-e.v)
		}
	}
	return added, removed
}
