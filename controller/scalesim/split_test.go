package scalesim

import (
	"strings"
	"testing"
)

func TestSplitAndMissed(t *testing.T) {
	// nn: NeuroNetes' replica-seconds against a hindsight and an
	// implementable reference of 100 each; within: its requests within the
	// SLO, of 100.
	mk := func(name string, nn float64, within int) Outcome {
		return Outcome{Trace: name, Causal: CausalRef{Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: 100}, Met: true},
			Impl:    ImplRef{Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: 100}, Found: true},
			Results: []Result{{Policy: "neuronetes", Requests: 100, WithinSLO: within, ReplicaSeconds: nn}}}
	}
	outs := []Outcome{mk("real-a", 130, 100), mk("real-b", 100, 100), mk("synthetic-x", 110, 98), mk("synthetic-y", 104, 100)}
	tuned, held := Split(outs, 0.99, map[string]bool{"real-a": true, "real-b": true})
	if tuned.Traces != 2 || tuned.Met != 1 || tuned.MinAttainment != 1 {
		t.Fatalf("tuning set %+v: want 2 traces, 1 met (real-a's regret 1.30x), all within", tuned)
	}
	if held.Traces != 2 || held.Met != 1 || held.Worst != "synthetic-x" || held.MinAttainment != 0.98 {
		t.Fatalf("held out %+v: want 2 traces, 1 met, synthetic-x the worst at 98%%", held)
	}
	if g := held.GeoRegret; g < 1.0695 || g > 1.0697 { // sqrt(1.10 x 1.04)
		t.Fatalf("held-out geo-mean regret %v, want 1.0696", g)
	}
	var sb strings.Builder
	WriteSplit(&sb, outs, 0.99, map[string]bool{"real-a": true, "real-b": true})
	WriteMissed(&sb, outs, 0.99)
	got := sb.String()
	for _, want := range []string{
		"tuning set (the real traces the policy's constants were chosen on): 1 of 2 traces met",
		"held out (never used to choose anything): 1 of 2 traces met, geo-mean regret 1.070x",
		"missing on real-a: cost 1.300x > 1.05x the implementable reference (which holds 99.00%); regret 1.300x > 1.25x the hindsight reference\n",
		"missing on synthetic-x: attainment 98.00% < 99.00%; cost 1.100x > 1.05x",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "missing on real-b") || strings.Contains(got, "missing overall") {
		t.Errorf("a trace that met its targets, or a geo-mean regret of 1.104x, is listed as missing:\n%s", got)
	}
	sb.Reset()
	WriteMissed(&sb, []Outcome{mk("a", 120, 100), mk("b", 120, 100)}, 0.99)
	if want := "missing overall: geo-mean regret 1.200x > 1.15x, 4.3% over\n"; !strings.Contains(sb.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, sb.String())
	}
}
