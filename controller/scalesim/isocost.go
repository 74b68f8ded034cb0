package scalesim

import (
	"fmt"
	"io"
	"math"
	"sync"
	"text/tabwriter"
)

// IsoCost is a baseline re-run with its per-pod concurrency target lowered until
// it spends as much as a reference run, so that attainment is compared at equal
// cost instead of at each policy's own default cost.
type IsoCost struct {
	// Result is the run with the highest attainment among the searched targets
	// whose replica-seconds stay within the budget.
	Result Result
	// TargetUtilization is that run's Config.TargetUtilization.
	TargetUtilization float64
	// Found is false when even the highest searched target spends more than the
	// budget; Result is then that run.
	Found bool
	// Runs are every run of the search, for the cost-versus-attainment curve.
	Runs []Result
}

// isoCostHigh and isoCostLow bound the searched targets: from above every
// baseline's default (0.7 of the slots) down to 1/256 of the slots (1/16 of a
// request per pod with 16 slots); isoCostProbes bisections follow the two ends.
const isoCostHigh, isoCostLow, isoCostProbes = 0.9, 1.0 / 256, 9

// baselines returns the four baselines of All at target utilization u.
func baselines(m Model, c Config, u float64) []Policy {
	c.TargetUtilization = u
	return All(m, c)[1:]
}

// BaselineNames are the labels of the baselines in the order that BestIsoCost
// returns them.
func BaselineNames(m Model, c Config) []string {
	var out []string
	for _, p := range baselines(m, c, c.TargetUtilization) {
		out = append(out, p.Name())
	}
	return out
}

// BestIsoCost searches, for baseline i (in the order of BaselineNames), the
// target utilization in [1/256, 0.9] whose run spends at most budget
// replica-seconds with the highest attainment. A lower target means more
// replicas, so cost falls as the target rises; the search bisects on the target
// in log space for the boundary of the budget and keeps the best run within it.
func BestIsoCost(tr Trace, m Model, c Config, i int, budget float64, initial int) IsoCost {
	var runs []Result
	run := func(u float64) Result {
		r := Run(tr, m, baselines(m, c, u)[i], initial)
		runs = append(runs, r)
		return r
	}
	best := isoCostSearch(run, budget)
	best.Runs = runs
	return best
}

// isoCostSearch is BestIsoCost's bisection over run.
func isoCostSearch(run func(u float64) Result, budget float64) IsoCost {
	var best IsoCost
	consider := func(u float64, r Result) bool {
		within := r.ReplicaSeconds <= budget
		if within && (!best.Found || r.Attainment() > best.Result.Attainment()) {
			best = IsoCost{Result: r, TargetUtilization: u, Found: true}
		}
		return within
	}
	hi := isoCostHigh
	if r := run(hi); !consider(hi, r) {
		return IsoCost{Result: r, TargetUtilization: hi}
	}
	lo := isoCostLow
	if consider(lo, run(lo)) {
		return best
	}
	for range isoCostProbes {
		mid := math.Sqrt(lo * hi)
		if consider(mid, run(mid)) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return best
}

// BestIsoCosts runs BestIsoCost for every baseline, parallel of them at a
// time, and returns the results by baseline name (WriteTable's iso).
func BestIsoCosts(tr Trace, m Model, c Config, budget float64, initial, parallel int) map[string]IsoCost {
	names := BaselineNames(m, c)
	out := make([]IsoCost, len(names))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = BestIsoCost(tr, m, c, i, budget, initial)
		}()
	}
	wg.Wait()
	byName := make(map[string]IsoCost, len(names))
	for i, n := range names {
		byName[n] = out[i]
	}
	return byName
}

// writeIsoCost prints each baseline at NeuroNetes' cost, in the order of rs.
func writeIsoCost(w io.Writer, oracle, nn Result, rs []Result, iso map[string]IsoCost) {
	fmt.Fprintf(w, "at NeuroNetes' cost: each baseline with its per-pod concurrency target lowered until it spends as much (at most %.0f replica-s)\n",
		nn.ReplicaSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\ttarget\twithin SLO\treplica-s\tx oracle\tscale ops\tflaps\t")
	for _, r := range rs {
		b, ok := iso[r.Policy]
		if !ok {
			continue
		}
		target := fmt.Sprintf("%.3f", b.TargetUtilization)
		if !b.Found {
			target = "none within budget"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f%%\t%.0f\t%.3f\t%d\t%d\t\n", r.Policy, target, 100*b.Result.Attainment(), b.Result.ReplicaSeconds,
			b.Result.ReplicaSeconds/oracle.ReplicaSeconds, b.Result.ScaleOps, b.Result.Flaps)
	}
	tw.Flush()
}
