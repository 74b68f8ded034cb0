package scalesim

import (
	"bytes"
	"strings"
	"testing"
)

func TestBreakdownMisses(t *testing.T) {
	series := func(misses ...int) []Point {
		var out []Point
		for i, m := range misses {
			out = append(out, Point{T: float64(10 * i), Misses: m})
		}
		return out
	}
	p := Result{Policy: "neuronetes", Requests: 100, WithinSLO: 88, Series: series(5, 4, 0, 3)}
	ref := Result{Series: series(2, 0, 1, 3)}
	oracle := Result{Series: series(1, 0, 0, 0)}
	got := BreakdownMisses(p, ref, oracle)
	want := MissBreakdown{Misses: 12, Binned: 12, WithOracle: 1, WithRef: 5}
	if got != want {
		t.Fatalf("breakdown %+v, want %+v", got, want)
	}
	var buf bytes.Buffer
	writeWhy(&buf, Outcome{Results: []Result{p}, Causal: CausalRef{Result: ref}, Oracle: oracle})
	if s := buf.String(); !strings.Contains(s, "misses 12 of 100") || !strings.Contains(s, "at least 7 (58%) are neuronetes' own (more than either missed in the bin)") {
		t.Fatalf("why line %q", s)
	}
}
