package scalepolicy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// noise is a fixed pseudo-random demand per 30 s bucket in [1,20].
var noise = func() []float64 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]float64, 100)
	for i := range out {
		out[i] = float64(1 + r.IntN(20))
	}
	return out
}()

func TestForecaster(t *testing.T) {
	tests := []struct {
		name     string
		season   time.Duration
		demand   func(s float64) float64 // seconds since t0 -> demand
		duration time.Duration
		// check at the end: forecast for +horizon within tol of demand(end+horizon), confidence range
		tol            float64
		minConf, maxCf float64
	}{
		{"linear ramp is extrapolated with high confidence", 0, func(s float64) float64 { return 2 + s/60 }, 30 * time.Minute, 0.5, 0.9, 1},
		{"flat load", 0, func(float64) float64 { return 5 }, 20 * time.Minute, 0.01, 0.99, 1},
		{"seasonal bump is anticipated from one season ago", 10 * time.Minute, func(s float64) float64 {
			if m := math.Mod(s, 600); m >= 300 && m < 420 {
				return 12
			}
			return 3
		}, 34 * time.Minute, 1.5, 0, 1},
		{"noise gives low confidence", 0, func(s float64) float64 { return noise[int(s/30)%len(noise)] }, 30 * time.Minute, math.Inf(1), 0, 0.7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := 2 * time.Minute
			f := NewForecaster(tc.season, time.Hour, h)
			var fc, conf float64
			var ok bool
			end := t0.Add(tc.duration)
			for ts := t0; !ts.After(end); ts = ts.Add(5 * time.Second) {
				f.Observe(ts, tc.demand(ts.Sub(t0).Seconds()))
				fc, conf, ok = f.Predict(ts)
			}
			if !ok {
				t.Fatal("no forecast after enough history")
			}
			want := tc.demand(end.Add(h).Sub(t0).Seconds())
			if math.Abs(fc-want) > tc.tol {
				t.Errorf("forecast %.2f, want %.2f±%.2f", fc, want, tc.tol)
			}
			if conf < tc.minConf || conf > tc.maxCf {
				t.Errorf("confidence %.2f, want in [%.2f,%.2f]", conf, tc.minConf, tc.maxCf)
			}
		})
	}
}

func TestForecasterNeedsHistory(t *testing.T) {
	f := NewForecaster(0, time.Hour, time.Minute)
	f.Observe(t0, 3)
	if _, _, ok := f.Predict(t0); ok {
		t.Fatal("forecast from a single sample")
	}
	if c := f.Confidence(); c != 0 {
		t.Fatalf("confidence %v before any scored forecast", c)
	}
}

func TestDecidePredictiveScalesAhead(t *testing.T) {
	p := queuePolicy()
	p.MaxReplicas = 100
	p.Predictive = Predictive{Enabled: true, Horizon: 2 * time.Minute, MinConfidence: 0.7}
	a, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	cur := int32(2)
	sawPredictive := false
	for s := 0; s <= 1800; s += 15 {
		// queue grows linearly: demand(s) = 2 + s/60 replicas
		demand := 2 + float64(s)/60
		d := a.Decide(Input{Now: t0.Add(time.Duration(s) * time.Second), CurrentReplicas: cur,
			Metrics: map[MetricType]MetricValue{QueueDepth: {Value: demand * 10 / float64(cur), Valid: true}}})
		if d.Reason == ReasonPredictive {
			sawPredictive = true
			if float64(d.Desired) < demand+1 {
				t.Fatalf("at %ds predictive desired %d not ahead of demand %.1f", s, d.Desired, demand)
			}
		}
		cur = d.Desired
	}
	if !sawPredictive {
		t.Fatal("predictive never scaled ahead on a steady ramp")
	}
	// Same ramp with an impossible confidence bar: never predictive.
	p.Predictive.MinConfidence = 1
	a, _ = New(p)
	cur = 2
	for s := 0; s <= 1800; s += 15 {
		demand := 2 + float64(s)/60
		d := a.Decide(Input{Now: t0.Add(time.Duration(s) * time.Second), CurrentReplicas: cur,
			Metrics: map[MetricType]MetricValue{QueueDepth: {Value: demand * 10 / float64(cur), Valid: true}}})
		if d.Reason == ReasonPredictive {
			t.Fatalf("predictive used below minConfidence at %ds", s)
		}
		cur = d.Desired
	}
}

func TestForecasterTrendMustBeSignificant(t *testing.T) {
	tests := []struct {
		name    string
		buckets []float64 // one mean per 30 s bucket (horizon 2 min = 4 buckets ahead)
		want    float64
	}{
		// The least-squares slope is 0.12/bucket with a standard error of 0.24:
		// the forecast is the fitted level now (10.75 + 0.12*3.5), not the
		// extrapolation 4 buckets ahead (11.64).
		{"noisy plateau forecasts its level", []float64{10, 12, 9, 11, 10, 13, 9, 12}, 11.17},
		{"a clear ramp is extrapolated", []float64{2, 3, 4, 5, 6, 7, 8, 9}, 13},
		{"a noisy ramp is still a ramp", []float64{2, 3.5, 3.8, 5.2, 6, 7.4, 7.7, 9.1}, 12.93},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewForecaster(0, time.Hour, 2*time.Minute)
			var ts time.Time
			for i, v := range tc.buckets {
				ts = t0.Add(time.Duration(i) * 30 * time.Second)
				f.Observe(ts, v)
			}
			fc, _, ok := f.Predict(ts)
			if !ok {
				t.Fatal("no forecast")
			}
			if math.Abs(fc-tc.want) > 0.05 {
				t.Errorf("forecast %.3f, want %.2f", fc, tc.want)
			}
		})
	}
}

func TestFitLineStandardError(t *testing.T) {
	xs := []float64{0, 1, 2, 3}
	if a, b, se := fitLine(xs, []float64{1, 3, 5, 7}); a != 1 || b != 2 || se != 0 {
		t.Errorf("perfect line: a=%v b=%v se=%v, want 1, 2, 0", a, b, se)
	}
	// Residuals +-1 around y = 0: SSR 4, s^2 = 2, Sxx = 5, se = sqrt(2/5).
	if _, b, se := fitLine(xs, []float64{1, -1, -1, 1}); b != 0 || math.Abs(se-math.Sqrt(0.4)) > 1e-12 {
		t.Errorf("noise: b=%v se=%v, want 0, %v", b, se, math.Sqrt(0.4))
	}
}
