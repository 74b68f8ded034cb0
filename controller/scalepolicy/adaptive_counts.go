package scalepolicy

import (
	"math"
	"sort"
)

// TTFTCounts are the first tokens the pool produced since the previous
// decision, counted against the SLO as a TTFT histogram with bucket bounds at
// the thresholds would count them.
type TTFTCounts struct {
	// Total is the number of first tokens.
	Total float64
	// WithinSLO counts those with a TTFT at or below SLOTarget.TTFT.
	WithinSLO float64
	// WithinMargin counts those at or below AdaptiveMarginRatio x the SLO.
	WithinMargin float64
	// PrefillKnown is true when the first tokens' own prefill times are
	// known (a prefill-time histogram such as vLLM's
	// request_prefill_time_seconds, observed with each first token). The
	// adaptation then counts only the misses caused by waiting: a request
	// whose prefill alone exceeds a threshold misses it under any capacity.
	PrefillKnown bool
	// PrefillWithinSLO and PrefillWithinMargin count the first tokens whose
	// prefill alone took at most the SLO, and at most AdaptiveMarginRatio x
	// the SLO. A first token within a threshold was prefilled within it, so
	// PrefillWithinSLO - WithinSLO are the requests that missed the SLO only
	// because they waited.
	PrefillWithinSLO, PrefillWithinMargin float64
	// TTFTs and Prefills, when set, are the same first tokens' TTFTs and
	// prefill times as cumulative histograms, so that the margin can be
	// counted at another threshold than AdaptiveMarginRatio x the SLO: the
	// one the learned capacity model sizes the pool for (marginThreshold).
	TTFTs, Prefills *Cumulative
}

// Cumulative is a cumulative histogram in seconds: Counts[i] observations at
// or below Bounds[i] (increasing; the last may be +Inf). Exact histograms
// hold every observation as a bound and count in steps; others are
// interpolated within their buckets (CountAtOrBelow).
type Cumulative struct {
	Bounds, Counts []float64
	Exact          bool
}

// AtOrBelow counts the observations at or below x.
func (h *Cumulative) AtOrBelow(x float64) float64 {
	if !h.Exact {
		return CountAtOrBelow(h.Bounds, h.Counts, x)
	}
	i := sort.Search(len(h.Bounds), func(i int) bool { return h.Bounds[i] > x+1e-9 })
	if i == 0 {
		return 0
	}
	return h.Counts[i-1]
}

// withMargin recounts the margin at threshold seconds, and the first tokens
// that could meet it, where the histograms are known; otherwise c is returned
// unchanged.
func (c TTFTCounts) withMargin(threshold float64) TTFTCounts {
	if c.TTFTs == nil || threshold <= 0 {
		return c
	}
	c.WithinMargin = c.TTFTs.AtOrBelow(threshold)
	if c.PrefillKnown && c.Prefills != nil {
		c.PrefillWithinMargin = c.Prefills.AtOrBelow(threshold)
	}
	return c
}

// withMarginFeasible recounts the first tokens that could meet the margin as
// those prefilled within prefill seconds, where the prefill histogram is
// known; otherwise c is returned unchanged.
func (c TTFTCounts) withMarginFeasible(prefill float64) TTFTCounts {
	if !c.PrefillKnown || c.Prefills == nil || prefill <= 0 {
		return c
	}
	c.PrefillWithinMargin = c.Prefills.AtOrBelow(prefill)
	return c
}

// waitCounts returns, for the SLO and for the margin, the first tokens that
// could have met the threshold (their prefill fits it) and those that did
// not because they waited. Without prefill times every first token counts,
// and every miss is taken as a wait.
func (c TTFTCounts) waitCounts() (feasible, misses, marginFeasible, marginMisses float64) {
	if !c.PrefillKnown {
		return c.Total, math.Max(c.Total-c.WithinSLO, 0), c.Total, math.Max(c.Total-c.WithinMargin, 0)
	}
	feasible = math.Min(c.PrefillWithinSLO, c.Total)
	marginFeasible = math.Min(c.PrefillWithinMargin, feasible)
	return feasible, math.Max(feasible-c.WithinSLO, 0), marginFeasible, math.Max(marginFeasible-c.WithinMargin, 0)
}
