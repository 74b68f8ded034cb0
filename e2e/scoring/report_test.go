package scoring

import (
	"math"
	"slices"
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
		{Pool: "p0", Model: "m0", Node: "a", GPUs: 2}, // collision on its warm node
		{Pool: "p0", Model: "m0", Node: "b", GPUs: 2}, // 4 $/h, spot
		{Pool: "p1", Model: "m1", Node: "a", GPUs: 2}, // other pool: no collision; on m0's warm node
		{Pool: "p1", Model: "m1", Node: "a", GPUs: 2}, // collision off its warm node; on m0's warm node
	}
	r, err := Measure("x", 5, nodes, ps)
	if err != nil {
		t.Fatal(err)
	}
	want := Report{Scheduler: "x", Placed: 5, Wanted: 5, CostPerReplicaHour: 7.2, WarmShare: 0.4, WarmBound: 0.6, OnOtherWarm: 2, Collisions: 2, WarmCollisions: 1, ZoneSkew: 2, SpotRatio: 0.2}
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
	base := Report{Scheduler: "default", Placed: 10, Wanted: 10, CostPerReplicaHour: 8, WarmShare: 0.5, Collisions: 4, WarmCollisions: 1, ZoneSkew: 1}
	for _, tc := range []struct {
		name string
		mod  func(*Report)
		miss string // "" = pass
	}{
		{"better on all", func(r *Report) {}, ""},
		{"cost equal", func(r *Report) { r.CostPerReplicaHour = 8 }, "cost per replica-hour not lower"},
		{"warm equal", func(r *Report) { r.WarmShare = 0.5 }, "warm share not higher"},
		{"more collisions", func(r *Report) { r.Collisions = 6 }, "more same-pool collisions off warm nodes"},
		{"more collisions, the extra on warm nodes", func(r *Report) { r.Collisions, r.WarmCollisions = 7, 4 }, ""},
		{"fewer warm collisions, more elsewhere", func(r *Report) { r.Collisions, r.WarmCollisions = 4, 0 }, "more same-pool collisions off warm nodes"},
		{"skew 1 kept", func(r *Report) { r.ZoneSkew = 1 }, ""},
		{"skew worse", func(r *Report) { r.ZoneSkew = 2 }, "zone skew worse"},
		{"unplaced", func(r *Report) { r.Placed = 9 }, "not every replica placed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cand := Report{Scheduler: "neuronetes", Placed: 10, Wanted: 10, CostPerReplicaHour: 6, WarmShare: 0.7, Collisions: 4, WarmCollisions: 2, ZoneSkew: 0}
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

func TestScenarios(t *testing.T) {
	for _, tc := range []struct {
		name          string
		wanted, warm  int
		firstBatch    []Replica
		batches, pool int // batch count; replicas of pool 0 in all
	}{
		{"fleet", 144, 3, []Replica{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 0}, {5, 0, 0}, {0, 1, 0}}, 2, 24},
		{"burst", 144, 3, []Replica{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 0}, {5, 0, 0}, {0, 1, 0}}, 2, 24},
		{"gangs", 144, 3, []Replica{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 0}, {5, 0, 0}, {0, 1, 0}}, 3, 10},
		{"sequential", 120, 3, []Replica{{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 3, 0}, {0, 4, 0}, {0, 5, 0}, {0, 6, 0}}, 3, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ScenarioByName(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Wanted() != tc.wanted || s.WarmModels != tc.warm || len(s.Batches) != tc.batches {
				t.Errorf("wanted %d, warm models %d, batches %d; want %d, %d, %d", s.Wanted(), s.WarmModels, len(s.Batches), tc.wanted, tc.warm, tc.batches)
			}
			if got := s.Batches[0][:len(tc.firstBatch)]; !slices.Equal(got, tc.firstBatch) {
				t.Errorf("first batch starts %v, want %v", got, tc.firstBatch)
			}
			seen, pool0 := map[Replica]bool{}, 0
			for _, b := range s.Batches {
				for _, r := range b {
					if seen[r] {
						t.Fatalf("replica %v created twice", r)
					}
					seen[r] = true
					if r.Pool == 0 {
						pool0++
					}
				}
			}
			if pool0 != tc.pool {
				t.Errorf("pool 0 has %d replicas, want %d", pool0, tc.pool)
			}
			warmNodes := 0
			for _, n := range s.Layout() {
				if n.Warm["m0"] {
					warmNodes++
				}
				if len(n.Warm) > 1 || n.Warm["m3"] {
					t.Errorf("node %s warm for %v", n.Name, n.Warm)
				}
			}
			if warmNodes != 6 {
				t.Errorf("m0 warm on %d nodes, want 6", warmNodes)
			}
		})
	}
	if _, err := ScenarioByName("nope"); err == nil || !strings.Contains(err.Error(), "fleet") {
		t.Errorf("unknown scenario: %v, want an error listing the scenarios", err)
	}
}
