package scalepolicy

import (
	"sort"
	"time"
)

// State is the history of an Autoscaler in a serializable form, so that a controller can persist
// it and resume after a restart or a leader change without resetting stabilization, change
// policies, cooldown, the SLO safety clock or the forecaster.
type State struct {
	// Recs are raw recommendations, oldest first.
	Recs []Sample `json:"recs,omitempty"`
	// Events are applied changes (signed), oldest first.
	Events []Sample `json:"events,omitempty"`
	// LastScale and PrevLastScale are the last two applied changes' times.
	LastScale     time.Time `json:"lastScale,omitzero"`
	PrevLastScale time.Time `json:"prevLastScale,omitzero"`
	// SafeSince is when ttft-p95 entered the scale-down safety band (zero: not in it).
	SafeSince time.Time `json:"safeSince,omitzero"`
	// Forecast is the forecaster's history (nil without prediction).
	Forecast *ForecastState `json:"forecast,omitempty"`
	// Adaptive is the SLO adaptation's learned state (nil without adaptation).
	Adaptive *AdaptiveState `json:"adaptive,omitempty"`
}

// Sample is one timed value.
type Sample struct {
	T time.Time `json:"t"`
	V float64   `json:"v"`
}

// ForecastState is a Forecaster's history: its bucket means, the forecasts awaiting their
// outcome, and the recent errors that make its confidence.
type ForecastState struct {
	// Step is the bucket width; a forecaster of another width ignores the state.
	Step time.Duration `json:"step"`
	// Cur is the index of the bucket being filled.
	Cur int64 `json:"cur"`
	// Buckets are (index, sum, count), by index.
	Buckets [][3]float64 `json:"buckets,omitempty"`
	// Made are (target index, forecast), by index.
	Made [][2]float64 `json:"made,omitempty"`
	// Errors are the recent absolute percentage errors, oldest first.
	Errors []float64 `json:"errors,omitempty"`
}

// Snapshot returns a copy of the Autoscaler's history.
func (a *Autoscaler) Snapshot() State {
	s := State{LastScale: a.lastScale, PrevLastScale: a.prevLastScale, SafeSince: a.safeSince}
	for _, r := range a.recs {
		s.Recs = append(s.Recs, Sample{r.t, r.v})
	}
	for _, e := range a.events {
		s.Events = append(s.Events, Sample{e.t, e.v})
	}
	if a.forecast != nil {
		s.Forecast = a.forecast.snapshot()
	}
	if a.adapt != nil {
		s.Adaptive = a.adapt.state()
	}
	return s
}

// Restore replaces the Autoscaler's history with s, taken from an Autoscaler of the same pool
// (possibly of an older policy: windows and periods prune it at the next decision; a forecast of
// another bucket width is ignored). The cron schedules need no state: they are re-derived from
// the clock.
func (a *Autoscaler) Restore(s State) {
	a.recs, a.events = nil, nil
	for _, r := range s.Recs {
		a.recs = append(a.recs, timedValue{r.T, r.V})
	}
	for _, e := range s.Events {
		a.events = append(a.events, timedValue{e.T, e.V})
	}
	a.lastScale, a.prevLastScale, a.safeSince = s.LastScale, s.PrevLastScale, s.SafeSince
	if a.forecast != nil && s.Forecast != nil && s.Forecast.Step == a.forecast.step {
		a.forecast.restore(s.Forecast)
	}
	if a.adapt != nil && s.Adaptive != nil {
		a.adapt.restore(s.Adaptive)
	}
}

func (f *Forecaster) snapshot() *ForecastState {
	s := &ForecastState{Step: f.step, Cur: f.cur, Errors: append([]float64(nil), f.errors...)}
	for i, b := range f.buckets {
		s.Buckets = append(s.Buckets, [3]float64{float64(i), b.sum, b.n})
	}
	sort.Slice(s.Buckets, func(i, j int) bool { return s.Buckets[i][0] < s.Buckets[j][0] })
	for i, v := range f.made {
		s.Made = append(s.Made, [2]float64{float64(i), v})
	}
	sort.Slice(s.Made, func(i, j int) bool { return s.Made[i][0] < s.Made[j][0] })
	return s
}

func (f *Forecaster) restore(s *ForecastState) {
	f.cur = s.Cur
	f.buckets = make(map[int64]*bucket, len(s.Buckets))
	for _, b := range s.Buckets {
		f.buckets[int64(b[0])] = &bucket{sum: b[1], n: b[2]}
	}
	f.made = make(map[int64]float64, len(s.Made))
	for _, m := range s.Made {
		f.made[int64(m[0])] = m[1]
	}
	f.errors = append([]float64(nil), s.Errors...)
}

// MeterState is a CostMeter's state.
type MeterState struct {
	// Last is when replicas were last reported.
	Last time.Time `json:"last,omitzero"`
	// Replicas is the count reported then; it is charged until the next report.
	Replicas int32 `json:"replicas"`
	// Spent is the spend of Last's UTC day up to Last.
	Spent float64 `json:"spent"`
	// Rate is the $/hour charged from Last on; absent in states of older controllers, which
	// charge Replicas at the cost per replica-hour.
	Rate *float64 `json:"rate,omitempty"`
}

// Snapshot returns the meter's state.
func (m *CostMeter) Snapshot() MeterState {
	s := MeterState{Last: m.last, Replicas: m.replicas, Spent: m.spent}
	if m.rateSet {
		r := m.rate
		s.Rate = &r
	}
	return s
}

// Restore resumes from s: the next observation charges s.Rate (else s.Replicas) from s.Last on,
// so the time the controller was down is charged at the rate it last saw.
func (m *CostMeter) Restore(s MeterState) {
	m.last, m.replicas, m.spent = s.Last, s.Replicas, s.Spent
	m.rate, m.rateSet = 0, s.Rate != nil
	if s.Rate != nil {
		m.rate = *s.Rate
	}
}
