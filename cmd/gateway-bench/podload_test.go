package main

import (
	"math"
	"testing"
	"time"
)

func TestJoinedLoad(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(pod string, s, e int) span {
		return span{pod: pod, start: t0.Add(time.Duration(s) * time.Millisecond), end: t0.Add(time.Duration(e) * time.Millisecond)}
	}
	for _, tc := range []struct {
		name          string
		spans         []span
		picked, other float64
	}{
		{"none", nil, math.NaN(), math.NaN()},
		{"one pod", []span{at("a", 0, 10), at("a", 1, 10)}, math.NaN(), math.NaN()},
		// Every request goes to the busy pod while the other is idle.
		{"herding", []span{at("a", 0, 10), at("a", 1, 10), at("a", 2, 10), at("b", 20, 21)}, 0.75, 0},
		// Each goes to the idle one.
		{"spreading", []span{at("a", 0, 10), at("b", 1, 10), at("a", 20, 30), at("b", 21, 30)}, 0, 0.5},
		// A request sent as another ends on its pod does not count it.
		{"end before start", []span{at("a", 0, 5), at("a", 5, 6), at("b", 7, 8)}, 0, 0},
		// Three pods: the others' load is their mean.
		{"three pods", []span{at("a", 0, 10), at("b", 1, 10), at("c", 2, 10), at("a", 3, 10)}, 0.25, (0 + 0.5 + 1 + 2.0/2) / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, o := joinedLoad(tc.spans)
			if !same(p, tc.picked) || !same(o, tc.other) {
				t.Errorf("joinedLoad = %v, %v; want %v, %v", p, o, tc.picked, tc.other)
			}
		})
	}
}

func same(a, b float64) bool {
	return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9
}
