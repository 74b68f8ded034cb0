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

// resize chooses the scale and memory again (with Adaptive.Robust), at most
// every replayEvery, from the last replayWindow of the log once it spans
// replayMinLog: it calibrates the queue model's efficiency against the
// pool's own first tokens, then replays the candidates (ChooseRobust). When
// no candidate holds the SLO on every version of the log, the last choice
// stands.
func (a *adapter) resize(now time.Time) {
	st := &a.st
	if !a.robust || (!st.Replayed.IsZero() && now.Sub(st.Replayed) < replayEvery) {
		return
	}
	lg := a.log(now)
	if len(lg.need) < binsOf(replayMinLog, adaptBin) {
		return
	}
	st.Replayed = now
	m := a.replayModel()
	// Calibrate on the bins a replay judges: not an unforeseeable burst, and
	// not the pool's first minutes (its start, before any history).
	skip := unforeseeable(lg.need, m)
	if lg.fromStart {
		for i := range min(len(skip), binsOf(replayMinLog, adaptBin)) {
			skip[i] = true
		}
	}
	var total, misses float64
	for i := range lg.need {
		if !skip[i] {
			total += lg.total[i]
			misses += lg.misses[i]
		}
	}
	observed := 0.0
	if total > 0 {
		observed = misses / total
	}
	m.Efficiency = Calibrate(lg.need, lg.ready, skip, m, observed)
	st.Efficiency = m.Efficiency
	c := ChooseRobust(lg.need, m, a.budget, 2*a.budget)
	if !c.Met {
		return
	}
	if st.Scale == 0 {
		st.Headroom = 1 // from now on a correction on the replay's scale
	}
	st.Scale, st.Memory = c.Scale, c.Memory
}

// demandLog is the log a replay reads: per bin, oldest first, the mean need
// and mean ready replicas, and the first tokens that could meet the SLO and
// the misses among them. fromStart is true when the log begins with the
// pool's first bin.
type demandLog struct {
	need, ready, total, misses []float64
	fromStart                  bool
}

// log is the demand log of the last replayWindow.
func (a *adapter) log(now time.Time) demandLog {
	hi := binIndex(now)
	return readLog(a.st.Bins, hi-int64(replayWindow/adaptBin)+1, hi)
}

// readLog reads the bins with index in [lo, hi], from the first with a need.
// A decision interval that spans several bins counts in all of them, so a
// bin without a decision takes the means of the interval that covered it.
func readLog(bins []AdaptiveBin, lo, hi int64) demandLog {
	var l demandLog
	first := int64(-1)
	for _, b := range bins {
		if b.Index < lo || b.Index > hi || b.Span <= 0 || (first < 0 && b.Work <= 0) {
			continue
		}
		if first < 0 {
			first = b.Index
		}
		v, r := b.Work/b.Span, b.ReadyWork/b.Span
		for int64(len(l.need)) <= b.Index-first {
			l.need, l.ready = append(l.need, v), append(l.ready, r)
			l.total, l.misses = append(l.total, 0), append(l.misses, 0)
		}
		l.total[len(l.total)-1] += b.SLOTotal
		l.misses[len(l.misses)-1] += b.SLOMisses
	}
	l.fromStart = len(bins) > 0 && bins[0].Index >= lo
	return l
}

// meanPeak is the highest mean need of the bins within [from, to].
func (a *adapter) meanPeak(from, to time.Time) float64 {
	p := 0.0
	for _, v := range readLog(a.st.Bins, binIndex(from), binIndex(to)).need {
		p = math.Max(p, v)
	}
	return p
}
