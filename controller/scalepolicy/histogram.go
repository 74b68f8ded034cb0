package scalepolicy

import (
	"math"
	"time"
)

// CountAtOrBelow estimates how many observations of a cumulative histogram
// were at or below x: bounds are the bucket upper bounds in increasing order
// (+Inf last, or implied), cumulative the count at or below each bound. Within
// the bucket that holds x the count is interpolated linearly, as PromQL's
// histogram_fraction does; beyond the last finite bound every observation up to
// that bound counts and none of the +Inf bucket does. The controller counts a
// model server's TTFT histogram this way, and the simulator, given the same
// bounds, counts its first tokens the same way.
func CountAtOrBelow(bounds, cumulative []float64, x float64) float64 {
	prevBound, prevCount := 0.0, 0.0
	for i, b := range bounds {
		if i >= len(cumulative) {
			break
		}
		c := cumulative[i]
		if x < b {
			if math.IsInf(b, 1) || x <= prevBound {
				return prevCount
			}
			return prevCount + (c-prevCount)*(x-prevBound)/(b-prevBound)
		}
		prevBound, prevCount = b, c
	}
	return prevCount
}

// HistogramTTFTCounts counts total first tokens, of a cumulative TTFT
// histogram in seconds, against the SLO and against AdaptiveMarginRatio x
// the SLO (CountAtOrBelow), for the adaptive policy.
func HistogramTTFTCounts(bounds, cumulative []float64, total float64, slo time.Duration) TTFTCounts {
	if total <= 0 {
		return TTFTCounts{}
	}
	return TTFTCounts{Total: total, WithinSLO: CountAtOrBelow(bounds, cumulative, slo.Seconds()),
		WithinMargin: CountAtOrBelow(bounds, cumulative, AdaptiveMarginRatio*slo.Seconds()),
		TTFTs:        &Cumulative{Bounds: bounds, Counts: cumulative}}
}

// WithPrefill adds to c the counts of a cumulative prefill-time histogram in
// seconds (vllm:request_prefill_time_seconds) of the same first tokens: those
// prefilled within the SLO and within AdaptiveMarginRatio x the SLO, so the
// adaptation counts only the misses caused by waiting. With no first tokens,
// or no prefill observations, c is returned unchanged.
func (c TTFTCounts) WithPrefill(bounds, cumulative []float64, slo time.Duration) TTFTCounts {
	if c.Total <= 0 || len(cumulative) == 0 || cumulative[len(cumulative)-1] <= 0 {
		return c
	}
	c.PrefillKnown = true
	c.PrefillWithinSLO = CountAtOrBelow(bounds, cumulative, slo.Seconds())
	c.PrefillWithinMargin = CountAtOrBelow(bounds, cumulative, AdaptiveMarginRatio*slo.Seconds())
	c.Prefills = &Cumulative{Bounds: bounds, Counts: cumulative}
	return c
}
