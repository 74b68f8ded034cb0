package scalepolicy

import (
	"math"
	"time"
)

// headroom is the factor on the remembered peak: the robust sizing's scale
// times the correction learned from misses, or the learned headroom alone
// before the first replay.
func (a *adapter) headroom() float64 {
	if a.st.Scale > 0 {
		return a.st.Scale * a.st.Headroom
	}
	return a.st.Headroom
}

// clamp bounds the learned state. With a replay's choice the memory is one of
// the replay's candidates and the correction is at least 1.
func (a *adapter) clamp() {
	st := &a.st
	st.Headroom = math.Max(minHeadroom, math.Min(st.Headroom, maxHeadroom))
	if st.Scale > 0 {
		st.Headroom = math.Max(st.Headroom, 1)
		return
	}
	st.Memory = max(minMemory, min(st.Memory, maxMemory))
}

// coldStart is the measured replica start time, or defaultColdStart.
func (a *adapter) coldStart() time.Duration {
	if a.st.ColdStart > 0 {
		return a.st.ColdStart
	}
	return defaultColdStart
}

// observeStart measures how long the pool waits for the replicas it asked
// for: from the first decision that sees fewer ready replicas than asked to
// the first that sees them all ready (smoothed over the last few starts).
func (a *adapter) observeStart(now time.Time, ready, current int32) {
	st := &a.st
	if ready < current {
		if st.Starting.IsZero() {
			st.Starting = now
		}
		return
	}
	if st.Starting.IsZero() {
		return
	}
	d := now.Sub(st.Starting)
	st.Starting = time.Time{}
	if st.ColdStart == 0 {
		st.ColdStart = d
		return
	}
	st.ColdStart = (3*st.ColdStart + d) / 4
}

// replayModel is the queue model of this pool's replays: 10 s bins, the
// measured cold start, and waits up to AdaptiveMarginRatio x the SLO (what
// is left of the SLO for queueing once a request's own prefill is done).
func (a *adapter) replayModel() ReplayModel {
	return ReplayModel{Bin: adaptBin, ColdStart: a.coldStart(),
		Allowance: a.slo}
}

// resize chooses the scale and memory again (with Adaptive.Robust), at most every replayEvery,
// from the last replayWindow of the log, once it spans replayMinLog.
func (a *adapter) resize(now time.Time) {
	st := &a.st
	if !a.robust || (!st.Replayed.IsZero() && now.Sub(st.Replayed) < replayEvery) {
		return
	}
	need := a.needLog(now)
	if len(need) < binsOf(replayMinLog, adaptBin) {
		return
	}
	st.Replayed = now
	c := ChooseRobust(need, a.replayModel(), a.budget, 2*a.budget)
	if st.Scale == 0 {
		st.Headroom = 1 // from now on a correction on the replay's scale
	}
	st.Scale, st.Memory = c.Scale, c.Memory
}

// needLog is the mean need of the bins of the last replayWindow, one value
// per bin from the first bin with a need, oldest first. A decision interval
// that spans several bins counts in all of them, so a bin without a decision
// takes the mean of the interval that covered it.
func (a *adapter) needLog(now time.Time) []float64 {
	return meanNeeds(a.st.Bins, binIndex(now)-int64(replayWindow/adaptBin)+1, binIndex(now))
}

// meanNeeds is the mean need of the bins with index in [lo, hi], from the
// first with a need.
func meanNeeds(bins []AdaptiveBin, lo, hi int64) []float64 {
	var out []float64
	first := int64(-1)
	for _, b := range bins {
		if b.Index < lo || b.Index > hi || b.Span <= 0 || (first < 0 && b.Work <= 0) {
			continue
		}
		if first < 0 {
			first = b.Index
		}
		v := b.Work / b.Span
		for int64(len(out)) < b.Index-first {
			out = append(out, v) // covered by this bin's decision interval
		}
		out = append(out, v)
	}
	return out
}

// meanPeak is the highest mean need of the bins within [from, to].
func (a *adapter) meanPeak(from, to time.Time) float64 {
	p := 0.0
	for _, v := range meanNeeds(a.st.Bins, binIndex(from), binIndex(to)) {
		p = math.Max(p, v)
	}
	return p
}
