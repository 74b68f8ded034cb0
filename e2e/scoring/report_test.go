package scoring

import (
	"math"
	"strings"
	"testing"
)

func TestMeasure(t *testing.T) {
	nodes := []Node{
		{Name: "a", Zone: "z1", PricePerHour: 32, GPUs: 8, Warm: map[string]bool{"m0": true}},
		{Name: "b", Zone: "z2", Spot: true, PricePerHour: 16, GPUs: 8},
		{Name: "c", Zone: "z3", PricePerHour: 32, GPUs: 8},
	}
	ps := []Placement{
		{Pool: "p0", Model: "m0", Node: "a", GPUs: 2}, // 8 $/h, warm
		{Pool: "p0", Model: "m0", Node: "a", GPUs: 2}, // collision
		{Pool: "p0", Model: "m0", Node: "b", GPUs: 2}, // 4 $/h, spot
		{Pool: "p1", Model: "m1", Node: "a", GPUs: 2}, // other pool: no collision
	}
	r, err := Measure("x", 5, nodes, ps)
	if err != nil {
		t.Fatal(err)
	}
	want := Report{Scheduler: "x", Placed: 4, Wanted: 5, CostPerReplicaHour: 7, WarmShare: 0.5, Collisions: 1, ZoneSkew: 2, SpotRatio: 0.25}
	if math.Abs(r.CostPerReplicaHour-want.CostPerReplicaHour) > 1e-9 {
		t.Errorf("cost %v, want %v", r.CostPerReplicaHour, want.CostPerReplicaHour)
	}
	r.CostPerReplicaHour = want.CostPerReplicaHour
	if r != want {
		t.Errorf("Measure = %+v, want %+v", r, want)
	}
	if _, err := Measure("x", 1, nodes, []Placement{{Pool: "p", Node: "elsewhere"}}); err == nil {
		t.Error("placement on an unknown node: no error")
	}
}

func TestVerdict(t *testing.T) {
	base := Report{Scheduler: "default", Placed: 10, Wanted: 10, CostPerReplicaHour: 8, WarmShare: 0.5, Collisions: 4, ZoneSkew: 1}
	for _, tc := range []struct {
		name string
		mod  func(*Report)
		miss string // "" = pass
	}{
		{"better on all", func(r *Report) {}, ""},
		{"cost equal", func(r *Report) { r.CostPerReplicaHour = 8 }, "cost per replica-hour not lower"},
		{"warm equal", func(r *Report) { r.WarmShare = 0.5 }, "warm share not higher"},
		{"more collisions", func(r *Report) { r.Collisions = 5 }, "more same-pool collisions"},
		{"skew 1 kept", func(r *Report) { r.ZoneSkew = 1 }, ""},
		{"skew worse", func(r *Report) { r.ZoneSkew = 2 }, "zone skew worse"},
		{"unplaced", func(r *Report) { r.Placed = 9 }, "not every replica placed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cand := Report{Scheduler: "neuronetes", Placed: 10, Wanted: 10, CostPerReplicaHour: 6, WarmShare: 0.7, Collisions: 4, ZoneSkew: 0}
			tc.mod(&cand)
			ok, reasons := Verdict(base, cand)
			if ok != (tc.miss == "") || (tc.miss != "" && !strings.Contains(strings.Join(reasons, ";"), tc.miss)) {
				t.Errorf("Verdict = %v %v, want miss %q", ok, reasons, tc.miss)
			}
		})
	}
}

func TestModelLabelsDistinct(t *testing.T) {
	seen := map[string]int{}
	for m := range 8 {
		n := NodeObject(Node{Name: "n", Warm: map[string]bool{"m" + string(rune('0'+m)): true}}, nil)
		for k := range n.Labels {
			if strings.HasPrefix(k, "warm.neuronetes.io/") {
				if o, dup := seen[k]; dup {
					t.Fatalf("models %d and %d share warm label %s", o, m, k)
				}
				seen[k] = m
			}
		}
	}
	if len(seen) != 8 {
		t.Fatalf("%d warm labels for 8 models", len(seen))
	}
}
