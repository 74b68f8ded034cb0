package scalesim

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// eventGap is the longest time between two missed arrivals of one MissEvent (s).
const eventGap = 60

// MissEvent is a run of requests one policy missed and the other did not,
// whose arrivals lie within eventGap of the next: when, how many, and the
// mean serving replicas each run had over the event's 10 s bins.
type MissEvent struct {
	// From and To are the first and last missed arrival (s).
	From, To float64
	// Misses counts the requests.
	Misses int
	// Ours and Theirs are the mean serving replicas of NeuroNetes' run and of
	// the other run over the bins from From to To.
	Ours, Theirs float64
}

// Versus compares NeuroNetes' missed requests with another run's (a baseline
// re-run at NeuroNetes' cost) request by request, matched by arrival: which
// misses decide the comparison, and where they came.
type Versus struct {
	// Policy names the other run.
	Policy string
	// Ours and Theirs count each run's misses, never-served requests included.
	Ours, Theirs int
	// Shared counts the requests with a first token that both runs missed.
	Shared int
	// OursOnly groups the requests only NeuroNetes missed (with a first token).
	OursOnly []MissEvent
	// TheirsOnly counts the requests only the other run missed (with a first token).
	TheirsOnly int
	// Slack is the most slack (the SLO less the request's own prefill) among
	// NeuroNetes' missed requests with a first token (s).
	Slack float64
	// Tight counts the trace's evaluated requests with at most Slack of
	// slack; TightOurs and TightTheirs how many of them each run missed with
	// a first token.
	Tight, TightOurs, TightTheirs int
}

// Slacks returns the evaluated requests' slack (the SLO less their own
// prefill time, s), in ascending order: the wait each could afford.
func Slacks(tr Trace, m Model) []float64 {
	var out []float64
	for _, r := range tr.Requests {
		if r.Arrival >= m.Warmup.Seconds() {
			out = append(out, m.SLO.Seconds()-float64(r.In)/m.PrefillTPS)
		}
	}
	sort.Float64s(out)
	return out
}

// Compare builds the Versus of ours against theirs; slacks are the trace's
// Slacks and slo its SLO.
func Compare(ours, theirs Result, slacks []float64, slo float64) Versus {
	v := Versus{Policy: theirs.Policy, Ours: ours.Requests - ours.WithinSLO, Theirs: theirs.Requests - theirs.WithinSLO}
	in := make(map[float64]bool, len(theirs.Missed))
	for _, m := range theirs.Missed {
		in[m.Arrival] = true
	}
	var only []float64
	shared := map[float64]bool{}
	v.Slack = math.Inf(-1)
	for _, m := range ours.Missed {
		v.Slack = max(v.Slack, slo-m.Prefill)
		if in[m.Arrival] {
			v.Shared++
			shared[m.Arrival] = true
		} else {
			only = append(only, m.Arrival)
		}
	}
	v.TheirsOnly = len(theirs.Missed) - len(shared)
	if len(ours.Missed) > 0 {
		v.Tight = sort.Search(len(slacks), func(i int) bool { return slacks[i] > v.Slack+1e-9 })
		v.TightOurs = countTight(ours.Missed, slo, v.Slack)
		v.TightTheirs = countTight(theirs.Missed, slo, v.Slack)
	}
	sort.Float64s(only)
	for _, a := range only {
		if n := len(v.OursOnly); n > 0 && a-v.OursOnly[n-1].To <= eventGap {
			v.OursOnly[n-1].To = a
			v.OursOnly[n-1].Misses++
			continue
		}
		v.OursOnly = append(v.OursOnly, MissEvent{From: a, To: a, Misses: 1})
	}
	for i := range v.OursOnly {
		e := &v.OursOnly[i]
		e.Ours, e.Theirs = meanServing(ours.Series, e.From, e.To), meanServing(theirs.Series, e.From, e.To)
	}
	return v
}

// countTight counts the missed requests with at most slack of slack.
func countTight(ms []MissedRequest, slo, slack float64) int {
	n := 0
	for _, m := range ms {
		if slo-m.Prefill <= slack+1e-9 {
			n++
		}
	}
	return n
}

// meanServing is the mean serving replicas of the series' 10 s points whose
// bin (the 10 s before the point) overlaps [from, to].
func meanServing(s []Point, from, to float64) float64 {
	sum, n := 0.0, 0
	for _, p := range s {
		if p.T > from && p.T-10 <= to {
			sum += p.Serving
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// writeVersus prints, for every baseline that attains at least as much as
// NeuroNetes at its cost (a missed target), the requests that decide it.
func writeVersus(w io.Writer, o Outcome) {
	nn := o.NeuroNetes()
	for _, b := range o.Results[1:] {
		i, ok := o.Iso[b.Policy]
		if !ok || !i.Found || i.Result.Attainment() < nn.Attainment() {
			continue
		}
		fmt.Fprintln(w, Compare(nn, i.Result, o.Slacks, o.SLO.Seconds()).String())
	}
}

// String is one report line.
func (v Versus) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "decided by: missed requests: neuronetes %d, %s at our cost %d, both %d; neuronetes alone %d",
		v.Ours, v.Policy, v.Theirs, v.Shared, v.only())
	if len(v.OursOnly) > 0 {
		var es []string
		for _, e := range v.OursOnly {
			es = append(es, fmt.Sprintf("%d at %.0f-%.0f s (serving replicas: neuronetes %.1f, %s %.1f)", e.Misses, e.From, e.To, e.Ours, v.Policy, e.Theirs))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(es, "; "))
	}
	fmt.Fprintf(&b, ", %s alone %d", v.Policy, v.TheirsOnly)
	if !math.IsInf(v.Slack, -1) {
		fmt.Fprintf(&b, "; the most any request neuronetes misses could wait: %.1f s (the SLO less its own prefill); requests of the trace that could wait no more: %d, missed by neuronetes %d, by %s %d",
			v.Slack, v.Tight, v.TightOurs, v.Policy, v.TightTheirs)
	}
	return b.String()
}

// only counts the requests only NeuroNetes missed.
func (v Versus) only() int {
	n := 0
	for _, e := range v.OursOnly {
		n += e.Misses
	}
	return n
}
