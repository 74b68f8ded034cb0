package scalesim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// SplitStats summarizes NeuroNetes over a group of traces: how many met
// every target, the geometric-mean regret and cost over the implementable
// reference, and the lowest share within the SLO.
type SplitStats struct {
	// Traces and Met count the group's traces and those that met every target.
	Traces, Met int
	// GeoRegret is the geometric-mean regret over the traces with a
	// hindsight reference (0: none).
	GeoRegret float64
	// GeoImpl is the geometric mean of NeuroNetes' cost over the
	// implementable reference's, over the traces where that reference holds
	// the attainment target (0: none).
	GeoImpl float64
	// MinAttainment is the lowest share within the SLO (1 for no trace).
	MinAttainment float64
	// Worst names the trace of MinAttainment.
	Worst string
}

// Split summarizes outs over the traces that held (in) or did not hold (out)
// the tuning set: held[o.Trace] says which group each trace is in.
func Split(outs []Outcome, attainment float64, held map[string]bool) (tuned, heldOut SplitStats) {
	var tg, hg []Outcome
	for _, o := range outs {
		if held[o.Trace] {
			tg = append(tg, o)
		} else {
			hg = append(hg, o)
		}
	}
	return splitStats(tg, attainment), splitStats(hg, attainment)
}

func splitStats(outs []Outcome, attainment float64) SplitStats {
	s := SplitStats{Traces: len(outs), MinAttainment: 1}
	s.GeoRegret, _ = GeoRegret(outs)
	sum, n := 0.0, 0
	for _, o := range outs {
		if len(o.Failures(attainment)) == 0 {
			s.Met++
		}
		if a := o.NeuroNetes().Attainment(); a < s.MinAttainment || s.Worst == "" {
			s.MinAttainment, s.Worst = a, o.Trace
		}
		if o.Impl.Found && o.Impl.Result.Attainment() >= attainment && o.Impl.Result.ReplicaSeconds > 0 {
			sum += math.Log(o.NeuroNetes().ReplicaSeconds / o.Impl.Result.ReplicaSeconds)
			n++
		}
	}
	if n > 0 {
		s.GeoImpl = math.Exp(sum / float64(n))
	}
	return s
}

// String prints the summary on one line.
func (s SplitStats) String() string {
	if s.Traces == 0 {
		return "no trace"
	}
	return fmt.Sprintf("%d of %d traces met, geo-mean regret %.3fx, geo-mean x impl ref %.3fx, lowest within SLO %.2f%% (%s)",
		s.Met, s.Traces, s.GeoRegret, s.GeoImpl, 100*s.MinAttainment, s.Worst)
}

// WriteSplit prints NeuroNetes' results on the tuning set (the traces its
// constants and the implementable reference were chosen on) and on the
// held-out traces, one line each.
func WriteSplit(w io.Writer, outs []Outcome, attainment float64, held map[string]bool) {
	t, h := Split(outs, attainment, held)
	fmt.Fprintf(w, "tuning set (the real traces the policy's constants were chosen on): %s\n", t)
	fmt.Fprintf(w, "held out (never used to choose anything): %s\n", h)
}

// WriteMissed prints, for each trace that missed a target, which targets and
// by how much (Outcome.Failures), one line each, and the geometric-mean
// regret's gap: what the verdict that follows is missing.
func WriteMissed(w io.Writer, outs []Outcome, attainment float64) {
	for _, o := range outs {
		if fails := o.Failures(attainment); len(fails) > 0 {
			fmt.Fprintf(w, "missing on %s: %s\n", o.Trace, strings.Join(fails, "; "))
		}
	}
	if g, n := GeoRegret(outs); n > 0 && g > MaxGeoRegret {
		fmt.Fprintf(w, "missing overall: geo-mean regret %.3fx > %.2fx, %.1f%% over\n", g, MaxGeoRegret, 100*(g/MaxGeoRegret-1))
	}
}
