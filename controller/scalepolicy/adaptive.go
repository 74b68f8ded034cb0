package scalepolicy

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Adaptive makes the policy hold a share of requests within the TTFT SLO by
// online adaptation instead of per-workload tuning: the pool provisions
// headroom x the peak demand of a memory window (never less than the demand
// now), and both the headroom and the memory are learned from the pool's own
// first tokens (Input.TTFT).
type Adaptive struct {
	// Enabled turns adaptation on; it needs SLOTarget.Enabled and TTFT.
	Enabled bool
	// Attainment is the share of requests to keep within SLOTarget.TTFT, in
	// (0, 1) (default DefaultAttainment). The controller aims at half the
	// allowed misses, so that the share holds over bursts of misses.
	Attainment float64
	// Robust chooses the scale on the remembered peak and the memory by
	// replaying the last hour of the demand log through a queue model
	// (ChooseRobust) instead of learning them from misses alone; the headroom
	// learned from misses then corrects the replay's scale. Off by default:
	// on the benchmark it does not yet beat the learned parameters
	// (docs/autoscaling.md, "Robust sizing").
	Robust bool
	// Capacity sizes the pool from a capacity model learned from the pods'
	// reports (CapacityModel, fed by Input.Capacity): the offered prompt
	// tokens over the learned prefill rate, with the wait the SLO allows,
	// instead of the offered tokens per second over the tokens-per-second
	// target. It needs the offered demand (Input.Offered).
	Capacity bool
}

// DefaultAttainment is the share of requests an adaptive policy keeps within
// the SLO when none is given.
const DefaultAttainment = 0.99

// AdaptiveMarginRatio is the fraction of the SLO that Input.TTFT.WithinMargin
// counts against: the headroom only shrinks while the misses at this tighter
// threshold stay within the error budget.
const AdaptiveMarginRatio = 0.5

// The adaptation's constants. They are stated in the units of the SLO and of
// the error budget, never of a workload: nothing here was fitted to a trace's
// rate, prompt lengths or burst shape.
const (
	// adaptBin is the width of the demand and first-token history bins.
	adaptBin = 10 * time.Second
	// adaptPeriod is the time scale of adaptation: the headroom shrinks by
	// adaptGain per period with margin, and an error-budget deficit is measured
	// in budgets of one period.
	adaptPeriod = 10 * time.Minute
	adaptGain   = 0.3
	// shrinkTau is the time constant of the shrink with margin: two budget
	// periods, so that one period of margin undoes at most about 40% of a
	// raise (a raise must be disproved by more than one period of evidence)
	// while a start value or a raise decays within the hour a pool's
	// traffic pattern typically holds (e^-3 in an hour).
	shrinkTau = 2 * adaptPeriod
	// initialHeadroom, minHeadroom and maxHeadroom bound the headroom factor.
	initialHeadroom, minHeadroom, maxHeadroom = 1.0, 0.3, 4.0
	// initialMemory, minMemory and maxMemory bound the memory window. The
	// initial memory is long: a pool cannot tell a dip from a lasting drop
	// until the load returns, and forgetting the peak too early is what misses
	// the SLO after a dip.
	initialMemory, minMemory, maxMemory = 20 * time.Minute, 2 * time.Minute, 40 * time.Minute
	// settleTime is the least time between two raises: a raise shows in the
	// first tokens only after new replicas start (about a minute) and the
	// requests they serve are measured.
	settleTime = 90 * time.Second
	// startupLag is how long before a miss the capacity that served it was
	// decided: the replicas' start plus part of the request's wait.
	startupLag = 60 * time.Second
)

// adapter is the adaptation of one Autoscaler.
type adapter struct {
	robust bool
	// capacity is the learned capacity model (nil unless Adaptive.Capacity).
	capacity *CapacityModel
	slo      time.Duration
	budget   float64 // the misses aimed at, as a share of requests
	st       AdaptiveState
}

// newAdapter returns the adaptation of an SLO target; priorTPS is the
// configured tokens-per-second target, the capacity model's prior.
func newAdapter(s SLOTarget, priorTPS float64) *adapter {
	att := s.Adaptive.Attainment
	if att == 0 {
		att = DefaultAttainment
	}
	a := &adapter{robust: s.Adaptive.Robust, slo: s.TTFT, budget: (1 - att) / 2,
		st: AdaptiveState{Headroom: initialHeadroom, Memory: initialMemory}}
	if s.Adaptive.Capacity {
		a.capacity = NewCapacityModel(s.TTFT, a.budget, priorTPS)
	}
	return a
}

func (a Adaptive) validate() error {
	if a.Attainment < 0 || a.Attainment >= 1 {
		return fmt.Errorf("sloTarget.adaptive.attainmentPercent: must be in (0,100), got %v", 100*a.Attainment)
	}
	return nil
}

func binIndex(t time.Time) int64 { return t.UnixNano() / int64(adaptBin) }

// bin returns the history bin of t, appending it (and pruning old ones) when new.
func (a *adapter) bin(t time.Time) *AdaptiveBin {
	i := binIndex(t)
	bs := a.st.Bins
	if n := len(bs); n > 0 && bs[n-1].Index == i {
		return &a.st.Bins[n-1]
	}
	keep := i - int64(2*maxMemory+startupLag+adaptPeriod)/int64(adaptBin)
	j := sort.Search(len(bs), func(k int) bool { return bs[k].Index >= keep })
	a.st.Bins = append(bs[j:], AdaptiveBin{Index: i, Settled: true})
	return &a.st.Bins[len(a.st.Bins)-1]
}

// peak is the highest need of the bins within [from, to].
func (a *adapter) peak(from, to time.Time) float64 {
	lo, hi := binIndex(from), binIndex(to)
	p := 0.0
	for _, b := range a.st.Bins {
		if b.Index >= lo && b.Index <= hi {
			p = math.Max(p, b.Need)
		}
	}
	return p
}

// recurringPeak is the peak the memory holds at now: the highest need of
// the bins within the memory whose level is known to come back. A bin
// younger than adaptPeriod always counts; an older one counts only when the
// history (all of it, not only the memory) holds another bin at least
// 1/e^adaptGain of its need (within one raise) more than startupLag away
// from it: a level the load has left and come back to. A peak seen once
// (one burst beyond every other) is held for adaptPeriod, the time scale
// over which the misses would have shown it was needed, and not for the
// whole memory; a level seen again, however far apart, is held for the
// whole memory.
func (a *adapter) recurringPeak(now time.Time) float64 {
	lo, hi := binIndex(now.Add(-a.st.Memory)), binIndex(now)
	young := binIndex(now.Add(-adaptPeriod))
	sep := int64(startupLag / adaptBin)
	bs := a.st.Bins
	p := 0.0
	for _, b := range bs {
		if b.Index < lo || b.Index > hi || b.Need <= p {
			continue
		}
		if b.Index >= young || a.recurs(b, sep) {
			p = b.Need
		}
	}
	return p
}

// recurs reports whether another bin of the history, more than sep bins away
// from b, reached at least b's need / e^adaptGain.
func (a *adapter) recurs(b AdaptiveBin, sep int64) bool {
	level := b.Need * math.Exp(-adaptGain)
	for _, o := range a.st.Bins {
		if (o.Index > b.Index+sep || o.Index < b.Index-sep) && o.Need >= level {
			return true
		}
	}
	return false
}

// at returns the bin of t, if it is in the history.
func (a *adapter) at(t time.Time) (AdaptiveBin, bool) {
	i := binIndex(t)
	bs := a.st.Bins
	j := sort.Search(len(bs), func(k int) bool { return bs[k].Index >= i })
	if j < len(bs) && bs[j].Index == i {
		return bs[j], true
	}
	return AdaptiveBin{}, false
}

// provisionAt is the latest target set at or before t (0 if none is known).
func (a *adapter) provisionAt(t time.Time) float64 {
	i := binIndex(t)
	v := 0.0
	for _, b := range a.st.Bins {
		if b.Index > i {
			break
		}
		if b.Provision > 0 {
			v = b.Provision
		}
	}
	return v
}

// marginThreshold is the TTFT (seconds) of a request at the capacity model's
// prefill quantile that waited its allowance: SLO - the allowance (0 without
// the capacity model: the margin as counted by the caller).
func (a *adapter) marginThreshold() float64 {
	if a.capacity == nil {
		return 0
	}
	return (a.capacity.slo - a.capacity.Allowance()).Seconds()
}

// marginPrefill is the prefill (seconds) within which a first token could
// meet the margin (AdaptiveMarginRatio x the SLO) with the wait the learned
// capacity model sizes the pool for: the margin less its allowance. A first
// token prefilled within it that misses the margin waited beyond what the
// pool was sized for; one with a longer prefill may miss it within the
// allowance (0: AdaptiveMarginRatio x the SLO, as counted by the caller).
func (a *adapter) marginPrefill() float64 {
	if a.capacity == nil {
		return 0
	}
	return AdaptiveMarginRatio*a.capacity.slo.Seconds() - a.capacity.Allowance().Seconds()
}

// exercised reports whether the load of the last adaptPeriod came within one
// raise (e^adaptGain) of the peak the memory holds: only then does a margin
// kept say that a shorter memory would have been enough. A margin kept at a
// load well below the remembered peak (a dip, a quiet end of a burst) says
// nothing about the peak's return.
func (a *adapter) exercised(now time.Time) bool {
	held := a.peak(now.Add(-a.st.Memory), now)
	return a.peak(now.Add(-adaptPeriod), now)*math.Exp(adaptGain) >= held
}

// margin reports whether the first tokens of the last adaptPeriod stayed within
// the budget at the tightened threshold (true without data).
func (a *adapter) margin(now time.Time) bool { return a.marginOf(now, false) }

// marginOf is margin, at the capacity model's slack when loose.
func (a *adapter) marginOf(now time.Time, loose bool) bool {
	from := binIndex(now.Add(-adaptPeriod))
	var total, within float64
	for _, b := range a.st.Bins {
		if b.Index >= from {
			if loose && a.capacity != nil {
				total += b.LooseTotal
				within += b.LooseWithin
				continue
			}
			total += b.Total
			within += b.WithinMargin
		}
	}
	return total == 0 || total-within <= a.budget*total
}

// decide folds one observation in and returns the replica target, unrounded:
// the headroom x the peak logged need within the memory, and at least the
// need plus the backlog. need is the demand in replicas at the metric targets
// (the running sequences included); logged is the part of it the history
// remembers, the offered demand where it is measured (else need); drain is the
// seconds the backlog is drained over (startFloor); ok is false when no metric
// was valid, and the need then enters no history.
func (a *adapter) decide(in Input, need, logged, backlog, drain float64, ok bool) float64 {
	now, st := in.Now, &a.st
	dt := 0.0
	if !st.Last.IsZero() && now.After(st.Last) {
		dt = now.Sub(st.Last).Seconds()
	}
	st.Last = now
	b := a.bin(now)
	ready := in.ReadyReplicas
	if ready <= 0 {
		ready = in.CurrentReplicas
	}
	if ok {
		// The peak remembered is the logged need: the offered demand where
		// it is measured. The running sequences a backlog flush leaves
		// after a burst count in need now, never as a peak to remember
		// (measured on Azure conv: a flush read as 8.6 replicas of need
		// where 3.3 were offered, held 20 minutes x the headroom).
		b.Need = math.Max(b.Need, logged)
		if dt > 0 {
			b.Work += logged * dt
			b.Span += dt
			b.ReadyWork += float64(ready) * dt
		}
	}
	b.Settled = b.Settled && ready >= in.CurrentReplicas
	a.observeStart(now, ready, in.CurrentReplicas)
	loose := in.TTFT.withMargin(a.marginThreshold())
	_, _, lFeasible, lMisses := loose.waitCounts()
	b.LooseTotal += lFeasible
	b.LooseWithin += lFeasible - lMisses
	feasible, misses, mFeasible, mMisses := in.TTFT.waitCounts()
	b.SLOTotal += feasible
	b.SLOMisses += misses
	b.Total += mFeasible
	b.WithinMargin += mFeasible - mMisses
	if dt > 0 {
		a.learn(now, dt, in.TTFT)
	}
	a.resize(now)
	// Never below the demand measured now plus its backlog: a pool short of
	// its current demand queues without bound, whatever the SLO allows. The
	// backlog is not remembered: once drained, it needs no capacity.
	peak := a.recurringPeak(now)
	if st.Scale > 0 {
		peak = a.meanPeak(now.Add(-st.Memory), now)
	}
	// Nor below the highest mean need of the last startupLag, whatever
	// the learned headroom: replicas removed now are a cold start away when
	// the load they served comes back (on a dip's end the headroom, shrunk
	// at full evidence, and the memory left the pool short of the load that
	// had just returned).
	recent := a.meanPeak(now.Add(-startupLag), now)
	// A start pays only if the queue outlasts it (startFloor).
	floor := a.startFloor(need, backlog, drain, float64(in.CurrentReplicas), float64(ready))
	target := math.Max(math.Max(a.headroom()*peak, recent), floor)
	b.Provision = target
	return target
}

// learn updates the headroom and memory from the first tokens of the last dt seconds.
func (a *adapter) learn(now time.Time, dt float64, c TTFTCounts) {
	st := &a.st
	total, miss, _, _ := c.waitCounts()
	if rate := total / dt; st.Rate == 0 {
		st.Rate = rate
	} else {
		st.Rate = 0.98*st.Rate + 0.02*rate
	}
	a.observeUsualRate(total, dt)
	period := adaptPeriod.Seconds()
	unit := a.budget * st.Rate * period // one period's budget, in requests
	st.Balance = math.Min(st.Balance+a.budget*total-miss, unit)
	if miss > 0 || !a.margin(now) {
		// LastMiss is the last time the pool had no margin.
		st.LastMiss = now
	} else {
		// With margin, whatever the load: the headroom shrinks with the time
		// constant shrinkTau, and the memory too once a period passed
		// without a miss, in proportion to the evidence: the first tokens
		// seen against the usual rate. A dip of 15% of the load shrinks them
		// at 15% of the speed; an idle pool proves nothing about its capacity.
		shrink := math.Exp(-dt * a.evidence(total, dt) / shrinkTau.Seconds())
		if st.Scale > 0 {
			// The replay sizes the pool; the correction only undoes raises.
			st.Headroom = math.Max(math.Min(st.Headroom, 1), st.Headroom*shrink)
		} else {
			st.Headroom *= shrink
		}
	}
	if miss > 0 || !a.marginOf(now, true) {
		st.LastMemoryMiss = now
	} else if st.Scale == 0 && now.Sub(st.LastMemoryMiss) > adaptPeriod {
		shrink := math.Exp(-dt * a.evidence(total, dt) / shrinkTau.Seconds())
		if a.exercised(now) {
			st.Memory = time.Duration(float64(st.Memory) * shrink)
		} else if st.Memory < initialMemory {
			// Kept at a load far below the peak held, the margin says
			// nothing of that peak's return: the memory relaxes back.
			st.Memory = min(initialMemory, time.Duration(float64(st.Memory)/shrink))
		}
	}
	if st.Balance < 0 && unit > 0 && now.Sub(st.LastRaise) >= settleTime {
		a.raise(now, math.Min(-st.Balance/unit, 1))
		st.Balance, st.LastRaise = 0, now
	}
	a.clamp()
}

// observeUsualRate folds total first tokens over dt seconds into the usual
// rate: their mean since the first observation until it spans the shrink's
// time constant, then an exponential average over that time constant. (Set
// from the first interval alone, the usual rate of a pool that starts in a
// burst stayed several times the real one for most of the time constant.)
func (a *adapter) observeUsualRate(total, dt float64) {
	st := &a.st
	tau := shrinkTau.Seconds()
	if st.UsualRate > 0 && st.RateSpan == 0 {
		st.RateSpan = tau // restored from a state that did not keep the span
	}
	st.RateSpan = math.Min(st.RateSpan+dt, tau)
	k := math.Max(1-math.Exp(-dt/tau), dt/st.RateSpan)
	st.UsualRate += k * (total/dt - st.UsualRate)
}

// evidence is the share of the usual first-token rate that total first
// tokens over dt seconds make. It is not capped at 1: each first token within
// the margin is the same evidence whether it comes steadily or in a burst, so
// over the usual rate's time constant traffic of any shape counts in full,
// and a dip to 15% of the usual rate counts 15%. (Capped at 1 per decision,
// bursty traffic counted a fraction of its first tokens: on Azure code the
// headroom raised at the start, 2.14, was still 1.44 half an hour later.) The
// usual rate is averaged over the shrink's own time constant: measured
// against a rate that follows the load within minutes, a lasting dip would
// soon count as full evidence.
func (a *adapter) evidence(total, dt float64) float64 {
	if a.st.UsualRate <= 0 || dt <= 0 {
		return 0
	}
	return total / dt / a.st.UsualRate
}

// raise answers an overspent error budget (d periods' worth, at most 1). When
// a memory twice as long would have held more capacity at the time the missed
// requests' capacity was decided, the pool forgot a peak too early and the
// memory grows; otherwise the headroom does, unless the need since then went
// beyond one raise over the peak remembered then.
func (a *adapter) raise(now time.Time, d float64) {
	st := &a.st
	at := now.Add(-min(a.slo, 30*time.Second) - startupLag)
	longer := a.peak(at.Add(-2*st.Memory), at)
	held := a.provisionAt(at) / a.headroom()
	if st.Scale == 0 && longer > 1.05*held && st.Memory < maxMemory {
		st.Memory = time.Duration(float64(st.Memory) * math.Exp(3*adaptGain*d))
		return
	}
	// A need since then beyond one raise over the peak remembered then is a
	// burst no headroom learned from misses foresees: the need + backlog
	// term answers it, and a headroom raised for it would be held for every
	// lesser peak after it (Azure code: a start burst of 2.5x raised the
	// headroom to 2.11). A load that returns within the remembered peak
	// (after a dip) is foreseen, however low the provision was: its misses
	// raise the headroom. (Measured against the provision instead, the
	// raise after synthetic-dip-12's dip was skipped: 97.72% -> 95.58%.)
	if p := a.peak(at.Add(-st.Memory), at); p > 0 && a.peak(at, now) > math.Exp(adaptGain)*p {
		return
	}
	st.Headroom *= math.Exp(adaptGain * d)
}

// Learned returns the adaptive policy's headroom (the robust sizing's scale
// times the correction learned from misses) and memory; ok is false for a
// policy without adaptation.
func (a *Autoscaler) Learned() (headroom float64, memory time.Duration, ok bool) {
	if a.adapt == nil {
		return 0, 0, false
	}
	return a.adapt.headroom(), a.adapt.st.Memory, true
}

// RememberedPeak is the peak need the adaptive policy's memory holds at now
// (recurringPeak: the headroom multiplies it); ok is false for a policy
// without adaptation.
func (a *Autoscaler) RememberedPeak(now time.Time) (peak float64, ok bool) {
	if a.adapt == nil {
		return 0, false
	}
	return a.adapt.recurringPeak(now), true
}
