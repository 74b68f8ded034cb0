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
	tests := []struct {
		name    string
		nn      Result
		ref     CausalRef
		iso     map[string]IsoCost
		verdict string
	}{
		{"met", nn, ref, nil, "MET (>= 99.00% within the SLO, <= 1.05x the causal reference"},
		{"baseline worse at our cost", nn, ref, map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 90, ReplicaSeconds: 109}, TargetUtilization: 0.2, Found: true}},
			"MET"},
		{"baseline as good at our cost", nn, ref, map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: 105}, TargetUtilization: 0.1, Found: true}},
			"NOT MET: hpa attains 99.00% at our cost (target 0.100)"},
		{"no target within budget", nn, ref, map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 100, ReplicaSeconds: 500}, TargetUtilization: 0.9}},
			"MET"},
		{"over the causal reference's cost", Result{Policy: "neuronetes", Requests: 100, WithinSLO: 99, ReplicaSeconds: 111}, ref, nil,
			"NOT MET: cost 1.057x > 1.05x the causal reference"},
		{"under the attainment", Result{Policy: "neuronetes", Requests: 100, WithinSLO: 98, ReplicaSeconds: 100}, ref, nil,
			"NOT MET: attainment 98.00% < 99.00%"},
		{"no causal reference", nn, CausalRef{Result: ref.Result}, nil, "NOT MET: no causal reference met the attainment target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Outcome{Trace: "x", Oracle: o, Causal: tt.ref, Results: []Result{tt.nn, hpa}, Iso: tt.iso}
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
	if got := sb.String(); got != "verdict: NOT MET on 1 of 1 traces: missing.csv\n" {
		t.Fatalf("verdict line %q", got)
	}
	sb.Reset()
	if WriteVerdict(&sb, nil, 0.99, nil) {
		t.Fatal("no trace at all passed the verdict")
	}
}
