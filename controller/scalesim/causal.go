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

// BestCausal searches, for each lookback, the smallest alpha in [0.5, 16] whose
// causal curve keeps at least attainment of the requests within the SLO, and
// returns the cheapest. Each lookback costs about 10 simulation runs.
func BestCausal(tr Trace, m Model, attainment float64, maxReplicas int, lookbacks []int) CausalRef {
	const binW = 10
	need := Need(tr, m, binW)
	var best, fallback CausalRef
	haveFallback := false
	for _, look := range lookbacks {
		try := func(alpha float64) Result {
			curve := CausalCurve(need, binW, alpha, look, maxReplicas)
			return Run(tr, m, &Oracle{curve: curve}, curve[0])
		}
		lo, hi := 0.5, 1.0
		r := try(hi)
		for r.Attainment() < attainment && hi < 16 {
			lo, hi = hi, hi*2
			r = try(hi)
		}
		if r.Attainment() < attainment {
			if !haveFallback || r.Attainment() > fallback.Result.Attainment() {
				fallback, haveFallback = CausalRef{Result: r, Lookback: look, Alpha: hi}, true
			}
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
		if !best.Met || r.ReplicaSeconds < best.Result.ReplicaSeconds {
			best = CausalRef{Result: r, Lookback: look, Alpha: hi, Met: true}
		}
	}
	if !best.Met {
		best = fallback
	}
	best.Result.Policy = "causal-ref"
	return best
}
