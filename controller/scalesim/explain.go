package scalesim

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// Explain rules: which term of NeuroNetes' target held the replicas a
// decision asked for.
const (
	// RuleHeadroom: the learned headroom x the peak need of the learned memory.
	RuleHeadroom = "headroom x peak"
	// RuleBacklog: the need now plus the backlog.
	RuleBacklog = "need + backlog"
	// RuleRecent: the highest mean need of the last minute's bins.
	RuleRecent = "recent need"
	// RuleMin and RuleMax: the policy's replica bounds.
	RuleMin, RuleMax = "min replicas", "max replicas"
	// RuleHold: no metric was valid (the first decision): the count held.
	RuleHold = "hold"
)

// explainer wraps NeuroNetes' Decider and records, per decision, the learned
// headroom and memory, the peak they multiply and the rule that held the target.
type explainer struct {
	*Decider
	w      io.Writer
	ph     float64
	pm     time.Duration
	rule   map[int]string
	detail map[int]string
}

// Decide implements Policy.
func (e *explainer) Decide(v View) int {
	n := e.Decider.Decide(v)
	s := int(math.Round(v.Now()))
	st := e.Decider.a.Snapshot().Adaptive
	if st == nil {
		return n
	}
	now := epoch.Add(time.Duration(v.Now() * float64(time.Second)))
	hi := now.UnixNano() / int64(10*time.Second)
	peak, _ := e.Decider.a.RememberedPeak(now)
	target, recent := 0.0, 0.0
	rlo := now.Add(-time.Minute).UnixNano() / int64(10*time.Second)
	for _, b := range st.Bins {
		if b.Index >= rlo && b.Index <= hi && b.Span > 0 {
			recent = math.Max(recent, b.Work/b.Span)
		}
		if b.Index == hi {
			target = b.Provision
		}
	}
	d := e.Decider.Last()
	rule := RuleHeadroom
	switch {
	case d.Reason == scalepolicy.ReasonNoMetrics:
		rule = RuleHold
	case d.Raw >= e.Policy.MaxReplicas && target > float64(e.Policy.MaxReplicas):
		rule = RuleMax
	case d.Raw <= e.Policy.MinReplicas && target < float64(e.Policy.MinReplicas):
		rule = RuleMin
	case target > st.Headroom*peak+1e-9 && math.Abs(target-recent) <= 1e-9:
		rule = RuleRecent
	case target > st.Headroom*peak+1e-9:
		rule = RuleBacklog
	}
	e.rule[s] = rule
	e.detail[s] = fmt.Sprintf("H %.2f M %s peak %.2f target %.2f -> %d (%s)", st.Headroom, st.Memory.Round(time.Second), peak, target, n, rule)
	if e.ph > 0 && (st.Headroom > e.ph*1.001 || st.Memory > e.pm+time.Second) {
		fmt.Fprintf(e.w, "  raise at %5d s: headroom %.2f -> %.2f, memory %s -> %s\n", s, e.ph, st.Headroom,
			e.pm.Round(time.Second), st.Memory.Round(time.Second))
	}
	e.ph, e.pm = st.Headroom, st.Memory
	return n
}

// Explain replays tr under NeuroNetes (preset c, starting at initial
// replicas) beside ref, a run of the reference on the same trace, and writes
// where NeuroNetes' replica-seconds above the reference go: the learned
// headroom's raises, one line per every seconds (the trace's need, both
// replica counts, the misses, the running excess over the evaluated part and
// the decision's headroom, memory, peak and holding rule), and the excess
// summed by the rule that held NeuroNetes' target. It returns the excess by rule.
func Explain(w io.Writer, tr Trace, m Model, c Config, ref Result, initial, every int) map[string]float64 {
	e := &explainer{Decider: NeuroNetes(m, c), w: w, rule: map[int]string{}, detail: map[int]string{}}
	fmt.Fprintf(w, "explain %s: NeuroNetes beside the reference (%s), every %d s\n", tr.Name, ref.Policy, every)
	nn := Run(tr, m, e, initial)
	need := Need(tr, m, causalBinW)
	by := map[string]float64{}
	var excess float64
	rule := RuleHold
	for i := range min(len(nn.Series), len(ref.Series)) {
		p, r := nn.Series[i], ref.Series[i]
		ts := int(math.Round(p.T))
		for s := ts - 9; s <= ts; s++ {
			if x, ok := e.rule[s]; ok {
				rule = x
			}
		}
		if p.T >= m.Warmup.Seconds() {
			d := 10 * (p.Replicas - r.Replicas)
			excess += d
			by[rule] += d
		}
		if every <= 0 || ts%every != 0 {
			continue
		}
		pk := 0.0
		for j := max(0, ts-every); j < ts && j < len(need); j++ {
			pk = math.Max(pk, need[j])
		}
		fmt.Fprintf(w, "  t %5d s  need %6.2f  neuronetes %3.0f  ref %3.0f  misses %3d/%3d (ref %3d)  excess %8.0f  | %s\n",
			ts, pk, p.Replicas, r.Replicas, p.Misses, p.Served, r.Misses, excess, e.detail[ts/5*5])
	}
	fmt.Fprintf(w, "explain %s: %.0f replica-s above the reference over the evaluated part (neuronetes %.0f, reference %.0f); by the rule that held NeuroNetes' target:",
		tr.Name, excess, nn.ReplicaSeconds, ref.ReplicaSeconds)
	for _, k := range []string{RuleHeadroom, RuleBacklog, RuleRecent, RuleMin, RuleMax, RuleHold} {
		if v, ok := by[k]; ok {
			fmt.Fprintf(w, " %s %.0f;", k, v)
		}
	}
	fmt.Fprintln(w)
	writeMissed(w, tr.Name, nn, m.SLO)
	return by
}

// explainMissedMax bounds the missed requests Explain lists one by one.
const explainMissedMax = 30

// writeMissed writes NeuroNetes' missed requests by the wait the SLO left
// them (the SLO less their own prefill): a request whose prefill alone takes
// most of the SLO misses on any queue at all, which no capacity decided a
// cold start earlier answers.
func writeMissed(w io.Writer, name string, r Result, slo time.Duration) {
	unserved := r.Requests - r.WithinSLO - len(r.Missed)
	fmt.Fprintf(w, "explain %s: %d missed requests, %d with a first token", name, r.Requests-r.WithinSLO, len(r.Missed))
	if len(r.Missed) == 0 {
		fmt.Fprintf(w, ", %d without\n", unserved)
		return
	}
	lo, hi := math.Inf(1), 0.0
	for _, x := range r.Missed {
		lo, hi = math.Min(lo, x.Prefill), math.Max(hi, x.Prefill)
	}
	fmt.Fprintf(w, ", %d without; their own prefill %.1f-%.1f s (%.0f-%.0f%% of the SLO: the wait they could afford %.1f-%.1f s)",
		unserved, lo, hi, 100*lo/slo.Seconds(), 100*hi/slo.Seconds(), slo.Seconds()-hi, slo.Seconds()-lo)
	for i, x := range r.Missed {
		if i == explainMissedMax {
			fmt.Fprintf(w, "; ... %d more", len(r.Missed)-i)
			break
		}
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(w, "%sarrival %.0f s TTFT %.1f s prefill %.1f s", sep, x.Arrival, x.TTFT, x.Prefill)
	}
	fmt.Fprintln(w)
}
