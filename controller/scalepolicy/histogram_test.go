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
	if got != want {
		t.Errorf("HistogramTTFTCounts = %+v, want %+v", got, want)
	}
	if (HistogramTTFTCounts(bounds, []float64{0, 0, 0, 0}, 0, time.Second) != TTFTCounts{}) {
		t.Error("no first tokens must count nothing")
	}
}
