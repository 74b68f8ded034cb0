package rolloutpolicy

import (
	"math"
	"sort"
)

// FisherGreater is the one-sided p-value of Fisher's exact test that the first group's share of
// "bad" outcomes is greater than the second's: P(X >= aBad) for X hypergeometric with the
// table's margins. It is exact for any counts; the sum stops once terms no longer matter.
func FisherGreater(aBad, aN, bBad, bN int64) float64 {
	if aN <= 0 || bN <= 0 {
		return 1
	}
	n := aN + bN
	k := aBad + bBad // all bad outcomes
	hi := min(k, aN)
	lo := max(0, k-bN)
	if aBad <= lo {
		return 1
	}
	logDen := logChoose(n, aN)
	p := 0.0
	for x := aBad; x <= hi; x++ {
		t := math.Exp(logChoose(k, x) + logChoose(n-k, aN-x) - logDen)
		p += t
		if t < 1e-17*p && x > aBad+10 {
			break
		}
	}
	return math.Min(1, p)
}

func logChoose(n, k int64) float64 {
	if k < 0 || k > n {
		return math.Inf(-1)
	}
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

// Histogram holds per-bucket (not cumulative) counts; Bounds are the buckets' upper bounds,
// ascending, the last one +Inf.
type Histogram struct {
	Bounds []float64
	Counts []float64
	// Sum of the observations (for the mean).
	Sum float64
}

// Total is the number of observations.
func (h Histogram) Total() float64 {
	t := 0.0
	for _, c := range h.Counts {
		t += c
	}
	return t
}

// Mean is Sum / Total (0 when empty).
func (h Histogram) Mean() float64 {
	if t := h.Total(); t > 0 {
		return h.Sum / t
	}
	return 0
}

// Add adds o's counts (the bounds must be equal; differing histograms are merged by bound).
func (h *Histogram) Add(o Histogram) {
	if len(h.Bounds) == 0 {
		h.Bounds = append([]float64(nil), o.Bounds...)
		h.Counts = append([]float64(nil), o.Counts...)
		h.Sum = o.Sum
		return
	}
	for i, b := range o.Bounds {
		j := sort.SearchFloat64s(h.Bounds, b)
		if j < len(h.Bounds) && h.Bounds[j] == b {
			h.Counts[j] += o.Counts[i]
		}
	}
	h.Sum += o.Sum
}

// Quantile estimates the q-quantile by linear interpolation inside the bucket, as Prometheus'
// histogram_quantile does (the +Inf bucket returns the last finite bound).
func (h Histogram) Quantile(q float64) float64 {
	total := h.Total()
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	cum := 0.0
	for i, c := range h.Counts {
		if cum+c >= rank && c > 0 {
			lo := 0.0
			if i > 0 {
				lo = h.Bounds[i-1]
			}
			hi := h.Bounds[i]
			if math.IsInf(hi, 1) {
				return lo
			}
			return lo + (hi-lo)*(rank-cum)/c
		}
		cum += c
	}
	return h.Bounds[len(h.Bounds)-2]
}

// Above returns the observations in buckets entirely above x: those whose lower bound is at
// least the smallest bucket bound >= x.
func (h Histogram) Above(x float64) float64 {
	j := sort.SearchFloat64s(h.Bounds, x) // Bounds[j] >= x
	n := 0.0
	for i := j + 1; i < len(h.Counts); i++ {
		n += h.Counts[i]
	}
	return n
}

// MannWhitneyLess is the one-sided p-value of the Mann-Whitney U test that values of a tend to
// be lower than values of b, on binned data (ties within a bucket), by the normal
// approximation with the tie correction. Both histograms must share bounds.
func MannWhitneyLess(a, b Histogram) float64 {
	n1, n2 := a.Total(), b.Total()
	if n1 == 0 || n2 == 0 || len(a.Counts) != len(b.Counts) {
		return 1
	}
	u, below := 0.0, 0.0
	tie := 0.0
	for i := range a.Counts {
		u += a.Counts[i] * (below + b.Counts[i]/2)
		below += b.Counts[i]
		t := a.Counts[i] + b.Counts[i]
		tie += t*t*t - t
	}
	n := n1 + n2
	mean := n1 * n2 / 2
	v := n1 * n2 / 12 * ((n + 1) - tie/(n*(n-1)))
	if v <= 0 {
		return 1
	}
	z := (u - mean + 0.5) / math.Sqrt(v) // continuity correction toward the null
	return 0.5 * math.Erfc(-z/math.Sqrt2)
}
