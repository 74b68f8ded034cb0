package scalesim

import (
	"fmt"
	"io"
	"math"
)

// MissBreakdown splits a policy's missed requests by the 10 s bin of their
// first token (Point.Misses): those in bins where the oracle with the same
// cold start also missed (at its cheapest run for the target: misses that
// knowing the future chose not to avoid), those where the hindsight reference
// also missed (what the reference rule, tuned on the trace itself, could not
// avoid either), and the rest, the policy's own. Shared misses are counted
// up to the other run's misses in the bin.
type MissBreakdown struct {
	// Misses counts the policy's evaluated misses (requests never served
	// included).
	Misses int
	// Binned counts those with a first token in the series.
	Binned int
	// WithOracle and WithRef count the binned misses shared with the oracle
	// and with the hindsight reference.
	WithOracle, WithRef int
}

// BreakdownMisses compares p's misses with the oracle's and ref's, bin by bin.
func BreakdownMisses(p, ref, oracle Result) MissBreakdown {
	bins := func(r Result) map[int]int {
		m := map[int]int{}
		for _, pt := range r.Series {
			m[int(math.Round(pt.T/10))] += pt.Misses
		}
		return m
	}
	o, c := bins(oracle), bins(ref)
	b := MissBreakdown{Misses: p.Requests - p.WithinSLO}
	for k, n := range bins(p) {
		b.Binned += n
		b.WithOracle += min(n, o[k])
		b.WithRef += min(n, c[k])
	}
	return b
}

// writeWhy prints why NeuroNetes misses what it misses: how many of its
// misses the oracle with the same cold start and the hindsight reference
// also had in the same 10 s bins.
func writeWhy(w io.Writer, o Outcome) {
	nn := o.NeuroNetes()
	b := BreakdownMisses(nn, o.Causal.Result, o.Oracle)
	if b.Misses == 0 {
		fmt.Fprintln(w, "why: neuronetes misses no request")
		return
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(max(b.Binned, 1)) }
	own := b.Binned - max(b.WithOracle, b.WithRef)
	fmt.Fprintf(w, "why: neuronetes misses %d of %d requests (%.2f%%); of the %d with a first token, %d (%.0f%%) came in 10 s bins where the oracle also missed (future-knowing, the same cold start, its cheapest run at the target: %.2f%% at %.3fx the hindsight reference's replica-seconds), %d (%.0f%%) where the hindsight reference also missed, and at least %d (%.0f%%) are neuronetes' own (more than either missed in the bin)\n",
		b.Misses, nn.Requests, 100*(1-nn.Attainment()), b.Binned, b.WithOracle, pct(b.WithOracle),
		100*o.Oracle.Attainment(), o.Oracle.ReplicaSeconds/math.Max(o.Causal.Result.ReplicaSeconds, 1),
		b.WithRef, pct(b.WithRef), own, pct(own))
}
