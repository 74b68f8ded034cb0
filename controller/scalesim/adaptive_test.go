package scalesim

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRunMeasuresRawTTFT(t *testing.T) {
	// One 3,000-token prompt on an idle replica prefilling 1,000 tokens/s: a raw
	// TTFT of 3 s, whatever the queue.
	tr := Trace{Name: "one", Requests: []Request{{Arrival: 0, In: 3000, Out: 2}, {Arrival: 30, In: 100, Out: 2}}}
	tests := []struct {
		slo                        time.Duration
		wantWithin, wantInfeasible int
	}{
		{2 * time.Second, 1, 1},
		{3 * time.Second, 2, 0},
	}
	for _, tc := range tests {
		m := testModel
		m.SLO = tc.slo
		r := Run(tr, m, &fixed{n: 1}, 1)
		if r.WithinSLO != tc.wantWithin || r.Infeasible != tc.wantInfeasible {
			t.Errorf("SLO %s: %d within, %d infeasible; want %d and %d", tc.slo, r.WithinSLO, r.Infeasible, tc.wantWithin, tc.wantInfeasible)
		}
		if math.Abs(r.P95TTFT-3) > 0.15 {
			t.Errorf("SLO %s: p95 TTFT %.2f s, want the raw 3 s", tc.slo, r.P95TTFT)
		}
	}
}

func TestAutoSLO(t *testing.T) {
	var rs []Request
	for i := range 1000 {
		rs = append(rs, Request{Arrival: float64(i), In: 10 * (i + 1)}) // 10 .. 10,000 tokens
	}
	tr := Trace{Name: "ramp", Requests: rs}
	tests := []struct {
		pct     float64
		queue   time.Duration
		want    time.Duration
		wantErr string
	}{
		{99.9, 2 * time.Second, 12 * time.Second, ""}, // 9,990 tokens at 1,000/s + 2 s, rounded up to 100 ms
		{50, time.Second, 6 * time.Second, ""},
		{0, time.Second, 0, "percentile"},
		{101, time.Second, 0, "percentile"},
	}
	for _, tc := range tests {
		got, err := AutoSLO(tr, testModel, tc.pct, tc.queue)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("pct %v: %v, want error with %q", tc.pct, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("pct %v: %s %v, want %s", tc.pct, got, err, tc.want)
		}
	}
}

func TestSyntheticTraces(t *testing.T) {
	const d = 40 * time.Minute
	for _, kind := range SyntheticKinds {
		t.Run(kind, func(t *testing.T) {
			a, err := Synthetic(kind, 7, d)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Synthetic(kind, 7, d)
			c, _ := Synthetic(kind, 8, d)
			if !reflect.DeepEqual(a, b) {
				t.Fatal("the same seed gave two traces")
			}
			if reflect.DeepEqual(a.Requests, c.Requests) {
				t.Fatal("two seeds gave the same trace")
			}
			// Arrivals per fifth of the trace follow the kind's shape.
			var fifths [5]float64
			for i, r := range a.Requests {
				if i > 0 && r.Arrival < a.Requests[i-1].Arrival {
					t.Fatalf("arrivals out of order at %d", i)
				}
				fifths[min(int(5*r.Arrival/d.Seconds()), 4)]++
			}
			per := d.Seconds() / 5 * SyntheticRate
			shape := map[string]func(f [5]float64) bool{
				"dip":     func(f [5]float64) bool { return f[2] < 0.3*per && f[0] > 0.8*per && f[4] > 0.8*per },
				"ramp":    func(f [5]float64) bool { return f[3] > 2.5*per && f[0] < 1.3*per },
				"burst":   func(f [5]float64) bool { return f[0] > 0.5*per },
				"diurnal": func(f [5]float64) bool { return f[2] > 2*f[0] && f[2] > 2*f[4] },
			}[kind]
			if !shape(fifths) {
				t.Fatalf("arrivals per fifth %v (base %.0f) do not follow the %s shape", fifths, per, kind)
			}
		})
	}
	if _, err := Synthetic("square", 1, d); err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Fatalf("unknown kind: %v", err)
	}
	if _, err := Synthetic("dip", 1, 0); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Fatalf("zero duration: %v", err)
	}
}

// adaptiveCostBound guards the adaptive preset's cost against regressions.
// The target is 1.05x the causal reference; measured on these traces
// the preset needs 1.2-2.0x (docs/autoscaling.md says why), so this bound is
// not that target.
const adaptiveCostBound = 2.25

// TestAdaptiveHoldsSLOOnSyntheticTraces replays 30 minutes of each synthetic
// shape (never used to choose the policy's constants' values on real traces)
// with the bench's replica model and auto SLO (about 10 s): the adaptive
// preset keeps 99% of the requests within the SLO on each.
func TestAdaptiveHoldsSLOOnSyntheticTraces(t *testing.T) {
	m := Model{PrefillTPS: 2000, DecodeTPS: 30, Slots: 16, ColdStart: time.Minute, WarmActivation: 5 * time.Second,
		Step: 100 * time.Millisecond, Warmup: 5 * time.Minute}
	for _, kind := range SyntheticKinds {
		t.Run(kind, func(t *testing.T) {
			tr, err := Synthetic(kind, 1, 30*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			m := m
			if m.SLO, err = AutoSLO(tr, m, 99.9, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			nn := Run(tr, m, NeuroNetes(m, Config{MaxReplicas: 64}), 8)
			ref := BestCausal(tr, m, 0.99, 64, DefaultLookbacks)
			ratio := nn.ReplicaSeconds / ref.Result.ReplicaSeconds
			t.Logf("%s (SLO %s): %.2f%% within the SLO at %.3fx the causal reference (L %d s, alpha %.2f)",
				tr.Name, m.SLO, 100*nn.Attainment(), ratio, ref.Lookback, ref.Alpha)
			if nn.Attainment() < 0.99 {
				t.Errorf("attainment %.2f%% < 99%%", 100*nn.Attainment())
			}
			if !ref.Met || ratio > adaptiveCostBound {
				t.Errorf("cost %.3fx the causal reference (met %v), over the regression bound %.2fx", ratio, ref.Met, adaptiveCostBound)
			}
		})
	}
}
