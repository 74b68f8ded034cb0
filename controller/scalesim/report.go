package scalesim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// MaxCausalCost is the cost target: NeuroNetes' replica-seconds over the
// causal reference's, at the attainment target.
const MaxCausalCost = 1.05

// Outcome is everything the benchmark measured on one trace.
type Outcome struct {
	// Trace names the trace; Requests counts its evaluated requests.
	Trace string
	// SLO is the TTFT SLO the trace was replayed under.
	SLO time.Duration
	// Oracle is the future-knowing reference (informational).
	Oracle Result
	// Causal is the oracle's rule fed only the past, the cost reference.
	Causal CausalRef
	// Results are NeuroNetes (first) and the baselines at their defaults.
	Results []Result
	// Iso holds the baselines re-run at NeuroNetes' cost, by policy name.
	Iso map[string]IsoCost
}

// NeuroNetes returns the NeuroNetes result (the first of Results).
func (o Outcome) NeuroNetes() Result { return o.Results[0] }

// Failures lists the targets NeuroNetes misses on this trace: at least
// attainment within the SLO, at most MaxCausalCost x the causal reference's
// replica-seconds, no baseline as good at no more cost at its defaults, and
// none attaining as much when re-run at NeuroNetes' cost. Empty means met.
func (o Outcome) Failures(attainment float64) []string {
	nn := o.NeuroNetes()
	var fails []string
	if nn.Attainment() < attainment {
		fails = append(fails, fmt.Sprintf("attainment %.2f%% < %.2f%%", 100*nn.Attainment(), 100*attainment))
	}
	switch {
	case !o.Causal.Met:
		fails = append(fails, "no causal reference met the attainment target")
	case nn.ReplicaSeconds > MaxCausalCost*o.Causal.Result.ReplicaSeconds:
		fails = append(fails, fmt.Sprintf("cost %.3fx > %.2fx the causal reference", nn.ReplicaSeconds/o.Causal.Result.ReplicaSeconds, MaxCausalCost))
	}
	for _, b := range o.Results[1:] {
		if b.Attainment() >= nn.Attainment() && b.ReplicaSeconds <= nn.ReplicaSeconds {
			fails = append(fails, fmt.Sprintf("%s is as good for no more cost", b.Policy))
		}
		if i, ok := o.Iso[b.Policy]; ok && i.Found && i.Result.Attainment() >= nn.Attainment() {
			fails = append(fails, fmt.Sprintf("%s attains %.2f%% at our cost (target %.3f)", b.Policy, 100*i.Result.Attainment(), i.TargetUtilization))
		}
	}
	return fails
}

// WriteOutcome prints the trace's table (costs relative to the causal
// reference and to the oracle), the causal reference, the baselines at
// NeuroNetes' cost and the trace's verdict line.
func WriteOutcome(w io.Writer, o Outcome, attainment float64) {
	ref := o.Causal.Result.ReplicaSeconds
	fmt.Fprintf(w, "trace %s: %d requests, TTFT SLO %s (%d requests take longer than the SLO to prefill alone)\n",
		o.Trace, o.Oracle.Requests, o.SLO, o.Oracle.Infeasible)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\twithin SLO\treplica-s\tx causal ref\tx oracle\twarm-s\tscale ops\tflaps\tp95 TTFT s\t")
	rows := append([]Result{o.Oracle, o.Causal.Result}, o.Results...)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.2f%%\t%.0f\t%.3f\t%.3f\t%.0f\t%d\t%d\t%.2f\t\n", r.Policy, 100*r.Attainment(), r.ReplicaSeconds,
			r.ReplicaSeconds/ref, r.ReplicaSeconds/o.Oracle.ReplicaSeconds, r.WarmSeconds, r.ScaleOps, r.Flaps, r.P95TTFT)
	}
	tw.Flush()
	state := "the cheapest searched run at the attainment target"
	if !o.Causal.Met {
		state = "no searched lookback and alpha met the attainment target; the best attainment is shown"
	}
	fmt.Fprintf(w, "causal reference: the oracle's rule fed only the past, alpha %.2f x the peak need of the last %d s (%s)\n",
		o.Causal.Alpha, o.Causal.Lookback, state)
	if len(o.Iso) > 0 {
		writeIsoCost(w, o.Oracle, o.NeuroNetes(), o.Results, o.Iso)
	}
	if fails := o.Failures(attainment); len(fails) > 0 {
		fmt.Fprintf(w, "trace verdict %s: NOT MET: %s\n\n", o.Trace, strings.Join(fails, "; "))
	} else {
		fmt.Fprintf(w, "trace verdict %s: MET (>= %.2f%% within the SLO, <= %.2fx the causal reference, no baseline as good at its default or at our cost)\n\n",
			o.Trace, 100*attainment, MaxCausalCost)
	}
}

// WriteVerdict prints the overall verdict line (to be printed last) and
// reports whether every trace met the targets. errs are traces that could not
// be run; any of them fails the verdict.
func WriteVerdict(w io.Writer, outs []Outcome, attainment float64, errs []string) bool {
	var missed []string
	for _, o := range outs {
		if len(o.Failures(attainment)) > 0 {
			missed = append(missed, o.Trace)
		}
	}
	missed = append(missed, errs...)
	if len(missed) == 0 && len(outs) > 0 {
		fmt.Fprintf(w, "verdict: MET on %d of %d traces\n", len(outs), len(outs))
		return true
	}
	fmt.Fprintf(w, "verdict: NOT MET on %d of %d traces: %s\n", len(missed), len(outs)+len(errs), strings.Join(missed, ", "))
	return false
}
