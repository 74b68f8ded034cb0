package scalepolicy

import (
	"math"
	"time"
)

// Robust sizing: the adaptive policy chooses its sizing parameters (the scale
// on the remembered peak and the memory window) by replaying the recent
// demand log through a queue model at a few candidate settings, on the log
// as seen and on perturbed versions of it (more load, bursts moved), and
// keeping the cheapest setting that holds the SLO on all of them. The replay
// is pure: it reads only the adapter's bins, so the live loop and the
// simulator, which both call Decide, size alike.

// The robust sizing's constants, in units of the SLO, the error budget and
// the bin width; none was fitted to a trace.
const (
	// replayWindow is how much of the log a replay reads: the last hour.
	replayWindow = time.Hour
	// replayMinLog is the least log a replay needs; before it the pool keeps
	// the initial scale and memory.
	replayMinLog = 5 * time.Minute
	// replayEvery is how often the sizing is chosen again.
	replayEvery = time.Minute
	// replayRate is the load perturbation: every bin's demand x 1.2.
	replayRate = 1.2
	// replayBlock is the length of the blocks whose bursts the shifted
	// perturbation moves, alternately earlier and later by half a cold start.
	replayBlock = 5 * time.Minute
	// defaultColdStart is the replicas' start time assumed until one is measured.
	defaultColdStart = 60 * time.Second
)

// replayScales and replayMemories are the candidate settings: the scale on
// the remembered peak need, and how long a peak is remembered (the
// reference rule's own lookbacks: about a cold start, and 5, 10, 20 minutes).
var (
	replayScales   = []float64{0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.2, 1.3, 1.45, 1.6, 1.8, 2, 2.5, 3, 4}
	replayMemories = []time.Duration{70 * time.Second, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute}
)

// ReplayModel is the queue model a replay runs: the demand of each bin, in
// replicas at the metric targets (one replica serves one unit of need per
// second), arrives at a pool-wide first-come-first-served queue served by the
// ready replicas; a replica asked for becomes ready ColdStart later, one
// removed leaves at once. Work waiting longer than Allowance misses the SLO.
type ReplayModel struct {
	// Bin is the width of a demand bin.
	Bin time.Duration
	// ColdStart is the time from asking for a replica to its serving.
	ColdStart time.Duration
	// Allowance is how long work may wait and still meet the SLO.
	Allowance time.Duration
	// Efficiency is the share of a replica's capacity at the metric targets
	// that it delivers to the queue (0: 1), calibrated against the pool's
	// own first tokens (Calibrate).
	Efficiency float64
}

func (m ReplayModel) efficiency() float64 {
	if m.Efficiency <= 0 {
		return 1
	}
	return m.Efficiency
}

// queue is the replay's pool-wide first-come-first-served queue.
type queue struct {
	w, allow, eff float64
	backlog       float64 // need-seconds waiting
	missed, total float64
}

// step serves one bin of work with ready replicas and counts the work whose
// wait exceeds the allowance (unless skip): work arriving at the bin's start
// waits behind the backlog, work arriving at its end behind what is left of
// it then.
func (q *queue) step(work, ready float64, skip bool) {
	capacity := q.eff * math.Max(ready, 1e-9) * q.w
	rate := capacity / q.w
	end := math.Max(q.backlog+work-capacity, 0)
	if !skip {
		q.missed += work * overShare(q.backlog/rate, end/rate, q.allow)
		q.total += work
	}
	q.backlog = end
}

func (q *queue) share() float64 {
	if q.total <= 0 {
		return 0
	}
	return q.missed / q.total
}

func newQueue(m ReplayModel) *queue {
	return &queue{w: m.Bin.Seconds(), allow: math.Max(m.Allowance.Seconds(), 1e-3), eff: m.efficiency()}
}

// ReplayReady is the share of the demand log need, outside the bins skip
// marks, that waits longer than the allowance when ready[i] replicas serve
// bin i.
func ReplayReady(need, ready []float64, skip []bool, m ReplayModel) float64 {
	if m.Bin <= 0 {
		return 0
	}
	q := newQueue(m)
	for i, v := range need {
		r := 1.0
		if i < len(ready) {
			r = ready[i]
		}
		q.step(v*q.w, r, i < len(skip) && skip[i])
	}
	return q.share()
}

// calibrationSteps are the efficiencies Calibrate tries, highest first.
var calibrationSteps = []float64{1, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5}

// Calibrate returns the highest efficiency at which the queue model, fed the
// replicas that were ready, misses at least the share observed outside the
// bins skip marks (waiting misses of the pool's own first tokens): the model
// is then no more optimistic than the pool was. With nothing observed it
// returns 1.
func Calibrate(need, ready []float64, skip []bool, m ReplayModel, observed float64) float64 {
	for _, e := range calibrationSteps {
		m.Efficiency = e
		if ReplayReady(need, ready, skip, m) >= observed {
			return e
		}
	}
	return calibrationSteps[len(calibrationSteps)-1]
}

// ReplayResult is one replay of a demand log under one setting.
type ReplayResult struct {
	// ReplicaSeconds is the replicas asked for, integrated over the log.
	ReplicaSeconds float64
	// Missed is the share of the demand (need-seconds) that waited longer
	// than the allowance.
	Missed float64
}

// Replay runs the adaptive rule, target = max(scale x the peak need of the
// last memory, the need now + the backlog drained within the allowance),
// decided at the end of each bin for the next, on the demand log need (one
// value per bin, oldest first) through the model m.
func Replay(need []float64, m ReplayModel, scale float64, memory time.Duration) ReplayResult {
	if len(need) == 0 || m.Bin <= 0 {
		return ReplayResult{}
	}
	return replay(need, slidingMax(need, binsOf(memory, m.Bin)), unforeseeable(need, m), m, scale, 1)
}

// unforeseeable marks the bins no candidate setting could have served: from
// a bin whose need exceeds the largest candidate scale x the highest need
// seen before it in the log (no setting had that capacity asked for), until
// a cold start later. Their work counts neither as missed nor in the total,
// for every candidate alike: a first burst larger than anything before says
// nothing about which setting is better.
func unforeseeable(need []float64, m ReplayModel) []bool {
	out := make([]bool, len(need))
	top := replayScales[len(replayScales)-1]
	cold := binsOf(m.ColdStart, m.Bin)
	seen, until := 0.0, -1
	for i, v := range need {
		if i > 0 && v > top*seen {
			until = i + cold
		}
		out[i] = i <= until
		seen = math.Max(seen, v)
	}
	return out
}

func binsOf(d, bin time.Duration) int { return max(1, int(math.Ceil(float64(d)/float64(bin)-1e-9))) }

// slidingMax is, per bin i, the highest need of bins (i-n, i].
func slidingMax(need []float64, n int) []float64 {
	out := make([]float64, len(need))
	var dq []int // indexes of decreasing need
	for i, v := range need {
		for len(dq) > 0 && need[dq[len(dq)-1]] <= v {
			dq = dq[:len(dq)-1]
		}
		dq = append(dq, i)
		if dq[0] <= i-n {
			dq = dq[1:]
		}
		out[i] = need[dq[0]]
	}
	return out
}

// replay is Replay with the peaks precomputed (peak[i]: the peak need of the
// memory ending at bin i), the bins skip marks left out of the misses, and
// load x the logged need arriving at the queue while the rule sees the log.
func replay(need, peak []float64, skip []bool, m ReplayModel, scale, load float64) ReplayResult {
	q := newQueue(m)
	cold := binsOf(m.ColdStart, m.Bin)
	asked := make([]float64, len(need))
	var cost, ready float64
	for i, v := range need {
		n := math.Max(1, math.Ceil(need[0]-1e-9))
		if i > 0 {
			n = math.Max(1, math.Ceil(math.Max(scale*peak[i-1], need[i-1]+q.backlog/q.allow)-1e-9))
		}
		if i < cold {
			// The log's first cold start: the pool is taken to have run
			// this setting before the log began, so what it asks is ready.
			ready = n
		} else {
			// Ready: what was ready and is still asked for, plus the replicas
			// asked for without a break over the last cold start.
			held := n
			for k := i - cold + 1; k < i; k++ {
				held = math.Min(held, asked[k])
			}
			ready = math.Min(n, math.Max(ready, held))
		}
		asked[i] = n
		cost += n * q.w
		q.step(load*v*q.w, ready, skip[i])
	}
	return ReplayResult{ReplicaSeconds: cost, Missed: q.share()}
}

// overShare is the share of a bin's arrivals whose wait exceeds allow when
// the wait grows linearly from w0 at the bin's start to w1 at its end.
func overShare(w0, w1, allow float64) float64 {
	switch {
	case w0 <= allow && w1 <= allow:
		return 0
	case w0 > allow && w1 > allow:
		return 1
	case w1 > allow:
		return (w1 - allow) / (w1 - w0)
	default:
		return (w0 - allow) / (w0 - w1)
	}
}

// perturbations returns the log as seen; with the bursts of alternate blocks
// moved earlier and later by half a cold start (each block rotated in
// place); and followed by a return of its mean load. The load perturbation,
// replayRate x the load arriving unseen, is applied by the replay to the
// second, a copy of the log (versionLoad).
func perturbations(need []float64, m ReplayModel) [][]float64 {
	shifted := make([]float64, len(need))
	block := binsOf(replayBlock, m.Bin)
	s := max(1, binsOf(m.ColdStart, m.Bin)/2)
	for b := 0; b*block < len(need); b++ {
		lo, hi := b*block, min((b+1)*block, len(need))
		n := hi - lo
		off := s % n
		if b%2 == 1 {
			off = n - off
		}
		for i := lo; i < hi; i++ {
			shifted[i] = need[lo+(i-lo+off)%n]
		}
	}
	// The load returns: the log followed, for a cold start and a block, by
	// its mean need, as after a dip a pool cannot tell from a lasting drop.
	var mean float64
	for _, v := range need {
		mean += v
	}
	mean /= float64(len(need))
	back := append([]float64(nil), need...)
	for range binsOf(m.ColdStart, m.Bin) + binsOf(replayBlock, m.Bin) {
		back = append(back, mean)
	}
	return [][]float64{need, need, shifted, back}
}

// versionLoad is the load factor of each version perturbations returns: the
// second is the log's rule facing replayRate x the load it measured (demand
// that grew, or that the measurement missed, until the backlog shows it).
var versionLoad = []float64{1, replayRate, 1, 1}

// RobustChoice is the sizing a replay chose.
type RobustChoice struct {
	// Scale multiplies the peak need of the memory window.
	Scale float64
	// Memory is how long a peak is remembered.
	Memory time.Duration
	// Met is true for a choice (always, given a log).
	Met bool
	// Missed is the worst share missed over the versions of the log.
	Missed float64
}

// ChooseRobust replays need (one value per bin, oldest first) at every
// candidate setting and returns the cheapest (replica-seconds on the log as
// seen) that misses at most budget of the demand on the log as seen and at
// most allowed on each perturbed version, beyond the least share any
// candidate misses on that version: misses no candidate avoids (a burst
// larger than any remembered peak, within a cold start) do not disqualify.
func ChooseRobust(need []float64, m ReplayModel, budget, allowed float64) RobustChoice {
	versions := perturbations(need, m)
	type run struct {
		scale  float64
		memory time.Duration
		cost   float64
		missed []float64
	}
	var runs []run
	skips := make([][]bool, len(versions))
	for j, v := range versions {
		skips[j] = unforeseeable(v, m)
	}
	floor := make([]float64, len(versions))
	for j := range floor {
		floor[j] = math.Inf(1)
	}
	for _, mem := range replayMemories {
		n := binsOf(mem, m.Bin)
		peaks := make([][]float64, len(versions))
		for j, v := range versions {
			peaks[j] = slidingMax(v, n)
		}
		for _, scale := range replayScales {
			r := run{scale: scale, memory: mem, missed: make([]float64, len(versions))}
			for j, v := range versions {
				res := replay(v, peaks[j], skips[j], m, scale, versionLoad[j])
				if j == 0 {
					r.cost = res.ReplicaSeconds
				}
				r.missed[j] = res.Missed
				floor[j] = math.Min(floor[j], res.Missed)
			}
			runs = append(runs, r)
		}
	}
	var best RobustChoice
	bestCost := math.Inf(1)
	for _, r := range runs {
		ok, worst := true, 0.0
		for j, miss := range r.missed {
			limit := allowed
			if j == 0 {
				limit = budget
			}
			ok = ok && miss <= floor[j]+limit
			worst = math.Max(worst, miss)
		}
		if ok && r.cost < bestCost {
			best, bestCost = RobustChoice{Scale: r.scale, Memory: r.memory, Met: true, Missed: worst}, r.cost
		}
	}
	return best
}
