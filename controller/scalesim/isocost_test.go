package scalesim

import (
	"strings"
	"testing"
)

// stepTrace is 10 minutes of 2 requests/s with a 5-minute step to 20/s.
func stepTrace() Trace {
	var rs []Request
	for i := range 1200 {
		ts := float64(i) / 2
		n := 1
		if ts >= 120 && ts < 420 {
			n = 10
		}
		for range n {
			rs = append(rs, Request{Arrival: ts, In: 200, Out: 20})
		}
	}
	return Trace{Name: "step", Requests: rs}
}

func TestBestIsoCost(t *testing.T) {
	tr, m := stepTrace(), testModel
	c := Config{MaxReplicas: 20, TargetUtilization: 0.7}
	names := BaselineNames(m, c)
	if strings.Join(names, ",") != "hpa,keda,knative-kpa,aibrix-apa" {
		t.Fatalf("baselines %v", names)
	}
	atDefault := Run(tr, m, baselines(m, c, 0.7)[0], 1) // the HPA at its default target
	tests := []struct {
		name      string
		budget    float64
		wantFound bool
	}{
		{"below the cheapest target", atDefault.ReplicaSeconds / 10, false},
		{"the default's cost", atDefault.ReplicaSeconds, true},
		{"twice the default's cost", 2 * atDefault.ReplicaSeconds, true},
		{"unbounded", 1e12, true},
	}
	prev := -1.0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BestIsoCost(tr, m, c, 0, tt.budget, 1)
			if got.Found != tt.wantFound {
				t.Fatalf("found %v, want %v (result %.0f replica-s at target %.3f)", got.Found, tt.wantFound, got.Result.ReplicaSeconds, got.TargetUtilization)
			}
			if !got.Found {
				return
			}
			if got.Result.ReplicaSeconds > tt.budget {
				t.Fatalf("%.0f replica-s over the budget %.0f", got.Result.ReplicaSeconds, tt.budget)
			}
			if got.Result.Attainment() < atDefault.Attainment() {
				t.Fatalf("attainment %.4f at a budget >= the default's cost, below the default's %.4f", got.Result.Attainment(), atDefault.Attainment())
			}
			// A larger budget never finds a worse run: the searched targets include the smaller budget's.
			if got.Result.Attainment() < prev-0.02 {
				t.Fatalf("attainment %.4f fell below %.4f with a larger budget", got.Result.Attainment(), prev)
			}
			prev = got.Result.Attainment()
		})
	}
}

func TestOutcomeVerdict(t *testing.T) {
	o := Result{Policy: "oracle", Requests: 100, WithinSLO: 99, ReplicaSeconds: 100}
	ref := CausalRef{Result: Result{Policy: "causal-ref", Requests: 100, WithinSLO: 99, ReplicaSeconds: 105}, Met: true}
	nn := Result{Policy: "neuronetes", Requests: 100, WithinSLO: 99, ReplicaSeconds: 110}
	hpa := Result{Policy: "hpa", Requests: 100, WithinSLO: 60, ReplicaSeconds: 80}
	impl := ImplRef{Result: Result{Policy: "impl-ref", Requests: 100, WithinSLO: 99, ReplicaSeconds: 106}, Lookback: 300, Alpha: 1.2, Found: true}
	tests := []struct {
		name    string
		nn      Result
		ref     CausalRef
		iso     map[string]IsoCost
		verdict string
		impl    *ImplRef
	}{
		{"met", nn, ref, nil, "MET (>= 99.00% within the SLO, <= 1.05x the implementable reference, regret <= 1.25x", nil},
		{"baseline worse at our cost", nn, ref, map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 90, ReplicaSeconds: 109}, TargetUtilization: 0.2, Found: true}},
			"MET", nil},
		{"baseline as good at our cost", nn, ref, map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: 105}, TargetUtilization: 0.1, Found: true}},
			"NOT MET: hpa attains 99.00% at our cost (target 0.100)", nil},
		{"no target within budget", nn, ref, map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 100, ReplicaSeconds: 500}, TargetUtilization: 0.9}},
			"MET", nil},
		{"over the implementable reference's cost", Result{Policy: "neuronetes", Requests: 100, WithinSLO: 99, ReplicaSeconds: 112}, ref, nil,
			"NOT MET: cost 1.057x > 1.05x the implementable reference (which holds 99.00%)", nil},
		{"regret over the hindsight reference", nn, CausalRef{Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: 80}, Met: true}, nil,
			"NOT MET: regret 1.375x > 1.25x the hindsight reference", nil},
		{"under the attainment", Result{Policy: "neuronetes", Requests: 100, WithinSLO: 98, ReplicaSeconds: 100}, ref, nil,
			"NOT MET: attainment 98.00% < 99.00%", nil},
		{"no implementable reference", nn, ref, nil, "NOT MET: no implementable reference", &ImplRef{}},
		// Tuned on other traces, the reference misses the target here: its
		// lower cost is no bar for a policy that holds the target.
		{"implementable reference under the target", nn, ref, nil, "MET",
			&ImplRef{Result: Result{Requests: 100, WithinSLO: 40, ReplicaSeconds: 50}, Found: true}},
		{"no hindsight reference", nn, CausalRef{Result: ref.Result}, nil, "NOT MET: no hindsight reference met the attainment target", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im := impl
			if tt.impl != nil {
				im = *tt.impl
			}
			out := Outcome{Trace: "x", Oracle: o, Causal: tt.ref, Impl: im, Results: []Result{tt.nn, hpa}, Iso: tt.iso}
			var sb strings.Builder
			WriteOutcome(&sb, out, 0.99)
			if !strings.Contains(sb.String(), "trace verdict x: "+tt.verdict) {
				t.Fatalf("want verdict %q in:\n%s", tt.verdict, sb.String())
			}
			if tt.iso != nil && !strings.Contains(sb.String(), "at NeuroNetes' cost") {
				t.Fatalf("iso-cost table missing:\n%s", sb.String())
			}
			sb.Reset()
			met := WriteVerdict(&sb, []Outcome{out}, 0.99, nil)
			if met != strings.HasPrefix(tt.verdict, "MET") {
				t.Fatalf("WriteVerdict reported %v for %q: %s", met, tt.verdict, sb.String())
			}
		})
	}
}

func TestWriteVerdictCountsUnreadTraces(t *testing.T) {
	var sb strings.Builder
	if WriteVerdict(&sb, nil, 0.99, []string{"missing.csv"}) {
		t.Fatal("a trace that could not be read passed the verdict")
	}
	if got := sb.String(); !strings.HasPrefix(got, "verdict: NOT MET on 1 of 1 traces: missing.csv;") {
		t.Fatalf("verdict line %q", got)
	}
	sb.Reset()
	if WriteVerdict(&sb, nil, 0.99, nil) {
		t.Fatal("no trace at all passed the verdict")
	}
}

func TestWriteVerdictGeoMeanRegret(t *testing.T) {
	// Two traces that each meet their targets (regret 1.20x and 1.24x) but
	// whose geometric-mean regret, 1.22x, exceeds 1.15x.
	mk := func(nn float64) Outcome {
		return Outcome{Trace: "t", Causal: CausalRef{Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: 100}, Met: true},
			Impl:    ImplRef{Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: nn}, Found: true},
			Results: []Result{{Policy: "neuronetes", Requests: 100, WithinSLO: 100, ReplicaSeconds: nn}}}
	}
	var sb strings.Builder
	if WriteVerdict(&sb, []Outcome{mk(120), mk(124)}, 0.99, nil) {
		t.Fatalf("geo-mean regret over 1.15x passed: %s", sb.String())
	}
	if !strings.Contains(sb.String(), "geo-mean regret 1.220x over 2 traces") {
		t.Fatalf("verdict line %q", sb.String())
	}
	sb.Reset()
	if !WriteVerdict(&sb, []Outcome{mk(110), mk(112)}, 0.99, nil) {
		t.Fatalf("met targets failed: %s", sb.String())
	}
}
