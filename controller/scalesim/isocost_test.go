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

func TestWriteTableIsoCostFailsVerdict(t *testing.T) {
	o := Result{Policy: "oracle", Requests: 100, WithinSLO: 99, ReplicaSeconds: 100}
	nn := Result{Policy: "neuronetes", Requests: 100, WithinSLO: 99, ReplicaSeconds: 110}
	hpa := Result{Policy: "hpa", Requests: 100, WithinSLO: 60, ReplicaSeconds: 80}
	tests := []struct {
		name    string
		iso     map[string]IsoCost
		verdict string
	}{
		{"no iso-cost runs", nil, "MET (>=99% SLO, <=1.15x oracle, beats every baseline)"},
		{"baseline worse at our cost", map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 90, ReplicaSeconds: 109}, TargetUtilization: 0.2, Found: true}},
			"MET (>=99% SLO, <=1.15x oracle, beats every baseline at its default and at our cost)"},
		{"baseline as good at our cost", map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 99, ReplicaSeconds: 105}, TargetUtilization: 0.1, Found: true}},
			"NOT MET: hpa attains 99.00% at our cost (target 0.100)"},
		{"no target within budget", map[string]IsoCost{"hpa": {Result: Result{Requests: 100, WithinSLO: 100, ReplicaSeconds: 500}, TargetUtilization: 0.9}},
			"MET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			WriteTable(&sb, "x", o, []Result{nn, hpa}, tt.iso)
			if !strings.Contains(sb.String(), "verdict x: "+tt.verdict) {
				t.Fatalf("want verdict %q in:\n%s", tt.verdict, sb.String())
			}
			if tt.iso != nil && !strings.Contains(sb.String(), "at NeuroNetes' cost") {
				t.Fatalf("iso-cost table missing:\n%s", sb.String())
			}
		})
	}
}
