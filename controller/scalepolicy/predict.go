package scalepolicy

import (
	"math"
	"time"
)

// Forecaster is a small, explainable seasonal-plus-trend model of demand (in
// replicas). Observations are averaged into buckets of Step; the forecast for
// t+horizon is a least-squares line through the recent buckets, plus the change
// seen one season ago over the same horizon when the history covers it.
// Confidence is 1 minus the mean absolute percentage error of its own past
// forecasts, so an unproven or erratic model is ignored by MinConfidence.
type Forecaster struct {
	step, season, lookback, horizon time.Duration
	buckets                         map[int64]*bucket
	cur                             int64
	// made maps a target bucket to the forecast made for it.
	made   map[int64]float64
	errors []float64
}

type bucket struct{ sum, n float64 }

// trendBuckets is how many recent buckets the trend line is fitted to.
const trendBuckets = 8

// maxErrors is how many past forecast errors feed the confidence.
const maxErrors = 20

// NewForecaster returns a forecaster for the given season, history length and
// horizon. The bucket width is horizon/4, at least 5 s.
func NewForecaster(season, lookback, horizon time.Duration) *Forecaster {
	return &Forecaster{
		step: max(horizon/4, 5*time.Second), season: season, lookback: lookback, horizon: horizon,
		buckets: map[int64]*bucket{}, made: map[int64]float64{}, cur: math.MinInt64,
	}
}

func (f *Forecaster) idx(t time.Time) int64 { return t.UnixNano() / int64(f.step) }

// Observe adds a demand sample.
func (f *Forecaster) Observe(t time.Time, v float64) {
	i := f.idx(t)
	if i > f.cur && f.cur != math.MinInt64 {
		f.score(f.cur)
		f.prune(i)
	}
	f.cur = i
	b := f.buckets[i]
	if b == nil {
		b = &bucket{}
		f.buckets[i] = b
	}
	b.sum += v
	b.n++
}

// score compares the forecast made for completed bucket i with what happened.
func (f *Forecaster) score(i int64) {
	fc, ok := f.made[i]
	b := f.buckets[i]
	if !ok || b == nil {
		return
	}
	actual := b.sum / b.n
	f.errors = append(f.errors, math.Abs(fc-actual)/math.Max(actual, 1))
	if len(f.errors) > maxErrors {
		f.errors = f.errors[1:]
	}
	delete(f.made, i)
}

func (f *Forecaster) prune(now int64) {
	oldest := now - int64(f.lookback/f.step) - 1
	for k := range f.buckets {
		if k < oldest {
			delete(f.buckets, k)
		}
	}
	for k := range f.made {
		if k < now {
			delete(f.made, k)
		}
	}
}

func (f *Forecaster) mean(i int64) (float64, bool) {
	b := f.buckets[i]
	if b == nil || b.n == 0 {
		return 0, false
	}
	return b.sum / b.n, true
}

// Confidence is 1 - mean absolute percentage error of past forecasts, in [0,1];
// 0 until three forecasts have been scored.
func (f *Forecaster) Confidence() float64 {
	if len(f.errors) < 3 {
		return 0
	}
	s := 0.0
	for _, e := range f.errors {
		s += e
	}
	return math.Max(0, 1-s/float64(len(f.errors)))
}

// Predict returns the demand forecast for now+horizon and its confidence; ok is
// false until enough history exists.
func (f *Forecaster) Predict(now time.Time) (float64, float64, bool) {
	i := f.idx(now)
	var xs, ys []float64
	for k := i - trendBuckets + 1; k <= i; k++ {
		if v, ok := f.mean(k); ok {
			xs = append(xs, float64(k))
			ys = append(ys, v)
		}
	}
	if len(xs) < 4 {
		return 0, 0, false
	}
	target := f.idx(now.Add(f.horizon))
	a, b, se := fitLine(xs, ys)
	if math.Abs(b) < trendSignificance*se {
		// The slope is within noise: forecast the fitted level, not a trend.
		a, b = a+b*float64(i), 0
	}
	fc := a + b*float64(target)
	if f.season > 0 {
		// A season of history replaces the trend: today's level plus the change
		// seen one season ago over the same horizon.
		sb := int64(f.season / f.step)
		then, ok1 := f.mean(target - sb)
		base, ok2 := f.mean(i - sb)
		if ok1 && ok2 {
			fc = ys[len(ys)-1] + then - base
		}
	}
	fc = math.Max(fc, 0)
	if _, seen := f.made[target]; !seen {
		f.made[target] = fc
	}
	return fc, f.Confidence(), true
}

// trendSignificance is how many standard errors the fitted slope must exceed
// for the trend to be extrapolated.
const trendSignificance = 2

// fitLine returns the least-squares intercept and slope, and the standard error
// of the slope (0 when it cannot be estimated: fewer than three points, or a
// perfect fit).
func fitLine(xs, ys []float64) (float64, float64, float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		x := xs[i] - xs[0]
		sx += x
		sy += ys[i]
		sxx += x * x
		sxy += x * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return sy / n, 0, 0
	}
	b := (n*sxy - sx*sy) / den
	a := (sy - b*sx) / n
	se := 0.0
	if n > 2 {
		var ss float64
		for i := range xs {
			r := ys[i] - (a + b*(xs[i]-xs[0]))
			ss += r * r
		}
		// Var(b) = s^2 / Sxx, with s^2 = SSR/(n-2) and Sxx = sum (x-mean)^2 = den/n.
		se = math.Sqrt(ss / (n - 2) / (den / n))
	}
	return a - b*xs[0], b, se
}
