package scalesim

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSlacks(t *testing.T) {
	tr := Trace{Requests: []Request{{Arrival: 1, In: 4000}, {Arrival: 10, In: 2000}, {Arrival: 20, In: 8000}}}
	m := Model{PrefillTPS: 2000, SLO: 5 * time.Second, Warmup: 5 * time.Second}
	if got, want := Slacks(tr, m), []float64{1, 4}; !reflect.DeepEqual(got, want) {
		t.Fatalf("slacks %v, want %v (the request before the warmup left out, ascending)", got, want)
	}
}

func TestCompare(t *testing.T) {
	flat := func(serving float64) []Point {
		var s []Point
		for i := 1; i <= 30; i++ {
			s = append(s, Point{T: float64(10 * i), Serving: serving})
		}
		return s
	}
	miss := func(arrival, prefill float64) MissedRequest {
		return MissedRequest{Arrival: arrival, TTFT: 10, Prefill: prefill}
	}
	const slo = 5.0
	slacks := []float64{0.5, 1, 1, 2, 3, 4, 4.5}
	cases := []struct {
		name         string
		ours, theirs []MissedRequest
		unserved     int // our misses without a first token
		want         Versus
	}{{
		name:     "one event decides",
		ours:     []MissedRequest{miss(100, 4), miss(130, 4), miss(150, 3), miss(250, 4.5)},
		theirs:   []MissedRequest{miss(250, 4.5), miss(260, 1)},
		unserved: 1,
		want: Versus{Policy: "hpa", Ours: 5, Theirs: 2, Shared: 1, TheirsOnly: 1, Slack: 2,
			OursOnly: []MissEvent{{From: 100, To: 150, Misses: 3, Ours: 6, Theirs: 7}},
			Tight:    4, TightOurs: 4, TightTheirs: 1},
	}, {
		name:   "events split by more than a minute",
		ours:   []MissedRequest{miss(100, 4), miss(161, 4)},
		theirs: nil,
		want: Versus{Policy: "hpa", Ours: 2, Theirs: 0, Slack: 1,
			OursOnly: []MissEvent{{From: 100, To: 100, Misses: 1, Ours: 6, Theirs: 7}, {From: 161, To: 161, Misses: 1, Ours: 6, Theirs: 7}},
			Tight:    3, TightOurs: 2},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ours := Result{Policy: "neuronetes", Requests: 100, WithinSLO: 100 - len(tc.ours) - tc.unserved, Missed: tc.ours, Series: flat(6)}
			theirs := Result{Policy: "hpa", Requests: 100, WithinSLO: 100 - len(tc.theirs), Missed: tc.theirs, Series: flat(7)}
			if got := Compare(ours, theirs, slacks, slo); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Compare\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestWriteVersusOnlyForABaselineAsGoodAtOurCost(t *testing.T) {
	nn := Result{Policy: "neuronetes", Requests: 100, WithinSLO: 98, Missed: []MissedRequest{{Arrival: 40, Prefill: 4}, {Arrival: 50, Prefill: 4}}}
	o := Outcome{SLO: 5 * time.Second, Slacks: []float64{1, 1, 3},
		Results: []Result{nn, {Policy: "hpa"}, {Policy: "keda"}},
		Iso: map[string]IsoCost{
			"hpa":  {Found: true, Result: Result{Policy: "hpa", Requests: 100, WithinSLO: 99, Missed: []MissedRequest{{Arrival: 40, Prefill: 4}}}},
			"keda": {Found: true, Result: Result{Policy: "keda", Requests: 100, WithinSLO: 97}},
		}}
	var buf bytes.Buffer
	writeVersus(&buf, o)
	got := buf.String()
	want := "decided by: missed requests: neuronetes 2, hpa at our cost 1, both 1; neuronetes alone 1 (1 at 50-50 s (serving replicas: neuronetes NaN, hpa NaN)), hpa alone 0; the most any request neuronetes misses could wait: 1.0 s (the SLO less its own prefill); requests of the trace that could wait no more: 2, missed by neuronetes 2, by hpa 1\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if strings.Contains(got, "keda") {
		t.Fatal("a baseline that attains less at our cost decides nothing")
	}
}
