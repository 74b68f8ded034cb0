package scalesim

import (
	"math"
)

// CausalRef is the oracle's rule fed only the past: it shows what the oracle's
// heuristic costs when it cannot see the future, which separates what a
// policy loses to not knowing when bursts come from what it loses to its rules.
type CausalRef struct {
	// Result is the run of the cheapest (Lookback, Alpha) that kept the attainment.
	Result Result
	// Lookback is how far back the peak need is taken (s).
	Lookback int
	// Alpha is the multiplier on that peak.
	Alpha float64
	// Met is false when no searched (Lookback, Alpha) kept the attainment; Result
	// is then the run with the highest attainment.
	Met bool
}

// CausalCurve is OracleCurve looking back instead of ahead: at second t it
// provisions alpha x the peak need of the bins of binW seconds that ended within
// the last lookback seconds. Invariant: curve[t] depends on need[:t-t%binW] only.
func CausalCurve(need []float64, binW int, alpha float64, lookback, maxReplicas int) []int {
	out := make([]int, len(need))
	for t := range need {
		end := t - t%binW // the bin containing t has not ended yet
		peak := 0.0
		for i := max(0, end-lookback); i < end; i++ {
			peak = math.Max(peak, need[i])
		}
		out[t] = max(1, min(int(math.Ceil(alpha*peak-1e-9)), maxReplicas))
	}
	return out
}

// DefaultLookbacks are the lookbacks BestCausal tries: the oracle's own
// lookahead (cold start + one bin) and 5, 10 and 20 minutes.
var DefaultLookbacks = []int{70, 300, 600, 1200}

// causalBinW is the width of the need bins of the causal reference (s).
const causalBinW = 10

// maxCausalAlpha bounds the searched alphas.
const maxCausalAlpha = 16

// RunCausal replays tr under the causal rule with one (lookback, alpha).
func RunCausal(tr Trace, m Model, need []float64, lookback int, alpha float64, maxReplicas int) Result {
	curve := CausalCurve(need, causalBinW, alpha, lookback, maxReplicas)
	return Run(tr, m, &Oracle{curve: curve}, curve[0])
}

// CausalSweep is, for each lookback, the smallest alpha in [0.5, 16] whose
// causal curve keeps the attainment on one trace (7 bisections), and its run.
type CausalSweep struct {
	// Lookbacks are the searched lookbacks (s).
	Lookbacks []int
	// Refs holds, per lookback, the cheapest run at the target (Met), or the
	// run at the largest alpha searched when none met it.
	Refs []CausalRef
}

// SweepCausal searches every lookback on tr; each costs about 10 runs.
func SweepCausal(tr Trace, m Model, attainment float64, maxReplicas int, lookbacks []int) CausalSweep {
	need := Need(tr, m, causalBinW)
	out := CausalSweep{Lookbacks: lookbacks}
	for _, look := range lookbacks {
		try := func(alpha float64) Result { return RunCausal(tr, m, need, look, alpha, maxReplicas) }
		lo, hi := 0.5, 1.0
		r := try(hi)
		for r.Attainment() < attainment && hi < maxCausalAlpha {
			lo, hi = hi, hi*2
			r = try(hi)
		}
		if r.Attainment() < attainment {
			out.Refs = append(out.Refs, CausalRef{Result: r, Lookback: look, Alpha: hi})
			continue
		}
		for range 6 {
			mid := (lo + hi) / 2
			if rm := try(mid); rm.Attainment() >= attainment {
				hi, r = mid, rm
			} else {
				lo = mid
			}
		}
		out.Refs = append(out.Refs, CausalRef{Result: r, Lookback: look, Alpha: hi, Met: true})
	}
	return out
}

// Best returns the cheapest lookback that met the target, or, when none did,
// the one with the highest attainment (Met false).
func (s CausalSweep) Best() CausalRef {
	var best, fallback CausalRef
	for i, r := range s.Refs {
		if r.Met && (!best.Met || r.Result.ReplicaSeconds < best.Result.ReplicaSeconds) {
			best = r
		}
		if i == 0 || r.Result.Attainment() > fallback.Result.Attainment() {
			fallback = r
		}
	}
	if !best.Met {
		best = fallback
	}
	best.Result.Policy = "causal-ref"
	return best
}

// BestCausal searches, for each lookback, the smallest alpha in [0.5, 16] whose
// causal curve keeps at least attainment of the requests within the SLO, and
// returns the cheapest: the reference tuned in hindsight on the trace itself.
// Each lookback costs about 10 simulation runs.
func BestCausal(tr Trace, m Model, attainment float64, maxReplicas int, lookbacks []int) CausalRef {
	return SweepCausal(tr, m, attainment, maxReplicas, lookbacks).Best()
}
