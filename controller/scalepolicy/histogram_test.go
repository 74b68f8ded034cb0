package scalepolicy

import (
	"math"
	"testing"
	"time"
)

func TestCountAtOrBelow(t *testing.T) {
	// 50 observations under 1 s, 40 in (1, 2.5], 10 in (5, +Inf).
	bounds := []float64{1, 2.5, 5, math.Inf(1)}
	cum := []float64{50, 90, 90, 100}
	tests := []struct {
		name    string
		bounds  []float64
		x, want float64
	}{
		{"interpolated from 0 in the first bucket", bounds, 0.5, 25},
		{"on a bound", bounds, 1, 50},
		{"within a bucket", bounds, 2, 50 + 40*(1.0/1.5)},
		{"on the last finite bound", bounds, 5, 90},
		{"the +Inf bucket never counts", bounds, 60, 90},
		{"+Inf implied", []float64{1, 2.5, 5}, 60, 90},
		{"zero", bounds, 0, 0},
	}
	for _, tc := range tests {
		if got := CountAtOrBelow(tc.bounds, cum, tc.x); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: CountAtOrBelow(%v) = %v, want %v", tc.name, tc.x, got, tc.want)
		}
	}
}

func TestHistogramTTFTCounts(t *testing.T) {
	bounds := []float64{0.5, 1, 2, math.Inf(1)}
	cum := []float64{10, 30, 70, 80}
	got := HistogramTTFTCounts(bounds, cum, 80, 1500*time.Millisecond)
	// SLO 1.5 s: half of the (1, 2] bucket; margin 0.75 s: half of (0.5, 1].
	want := TTFTCounts{Total: 80, WithinSLO: 30 + 20, WithinMargin: 10 + 10}
	if got.TTFTs == nil || got.TTFTs.AtOrBelow(1.5) != 50 {
		t.Errorf("HistogramTTFTCounts carries TTFTs %+v, want the histogram (50 at or below 1.5 s)", got.TTFTs)
	}
	got.TTFTs = nil
	if got != want {
		t.Errorf("HistogramTTFTCounts = %+v, want %+v", got, want)
	}
	if (HistogramTTFTCounts(bounds, []float64{0, 0, 0, 0}, 0, time.Second) != TTFTCounts{}) {
		t.Error("no first tokens must count nothing")
	}
}

func TestWithPrefillCountsWaitMisses(t *testing.T) {
	bounds := []float64{1, 2, 4, math.Inf(1)}
	// 10 first tokens: TTFT 4 at <=1 s, 3 in (2,4], 3 over 4 s; prefill: 8
	// at <=1 s, 2 over 4 s (they miss a 4 s SLO under any capacity).
	c := HistogramTTFTCounts(bounds, []float64{4, 4, 7, 10}, 10, 4*time.Second)
	c = c.WithPrefill(bounds, []float64{8, 8, 8, 10}, 4*time.Second)
	feasible, misses, mFeasible, mMisses := c.waitCounts()
	if feasible != 8 || misses != 1 || mFeasible != 8 || mMisses != 4 {
		t.Fatalf("feasible %v misses %v, margin feasible %v misses %v; want 8 1 8 4", feasible, misses, mFeasible, mMisses)
	}
	if none := (TTFTCounts{}).WithPrefill(bounds, []float64{0, 0, 0, 0}, time.Second); none.PrefillKnown {
		t.Fatal("no prefill observations must leave the counts unknown")
	}
}
