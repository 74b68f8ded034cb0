package scalepolicy

import "time"

// AdaptiveState is the adaptation's learned state and history, serializable
// for a controller that persists it across restarts.
type AdaptiveState struct {
	// Headroom multiplies the remembered peak demand.
	Headroom float64 `json:"headroom"`
	// Memory is how long a peak of demand is remembered.
	Memory time.Duration `json:"memory"`
	// Balance is the error budget saved (> 0) or overspent (< 0) since the
	// last raise, in requests.
	Balance float64 `json:"balance"`
	// Rate is the smoothed first-token rate, per second.
	Rate float64 `json:"rate"`
	// UsualRate is the first-token rate averaged over the shrink's time
	// constant, against which the shrink's evidence is measured.
	UsualRate float64 `json:"usualRate,omitempty"`
	// RateSpan is the time the usual rate averages, in seconds, up to the
	// shrink's time constant.
	RateSpan float64 `json:"rateSpan,omitempty"`
	// Last, LastRaise and LastMiss are the times of the last decision, of the
	// last raise, and of the last decision that saw a miss or no margin.
	Last      time.Time `json:"last,omitzero"`
	LastRaise time.Time `json:"lastRaise,omitzero"`
	LastMiss  time.Time `json:"lastMiss,omitzero"`
	// LastMemoryMiss is the last decision that saw a miss or no margin at
	// the capacity model's slack: the memory shrinks a period after it.
	LastMemoryMiss time.Time `json:"lastMemoryMiss,omitzero"`
	// Bins are the history, oldest first.
	Bins []AdaptiveBin `json:"bins,omitempty"`
	// Scale and Memory (above) are the robust sizing's choice once the log
	// is long enough for a replay (Scale 0: none yet; the headroom then
	// alone scales the peak, and the memory is learned from misses). With a
	// choice, the headroom is a correction learned from misses, at least 1.
	Scale float64 `json:"scale,omitempty"`
	// Replayed is the time of the last replay.
	Replayed time.Time `json:"replayed,omitzero"`
	// ColdStart is the measured time from asking for replicas to their
	// being ready (0: not measured yet), and Starting when the pool last
	// began to wait for replicas (zero: none pending).
	ColdStart time.Duration `json:"coldStart,omitempty"`
	Starting  time.Time     `json:"starting,omitzero"`
	// Efficiency is the replay's queue model calibration (ReplayModel.Efficiency).
	Efficiency float64 `json:"efficiency,omitempty"`
	// Capacity is the learned capacity model's state (Adaptive.Capacity).
	Capacity *CapacityState `json:"capacity,omitempty"`
}

// AdaptiveBin is one adaptBin of history.
type AdaptiveBin struct {
	// Index is the bin's start time in units of the bin width since the Unix epoch.
	Index int64 `json:"i"`
	// Need is the peak logged demand of the bin (the offered demand where it
	// is measured), in replicas at the metric targets.
	Need float64 `json:"need"`
	// Provision is the latest replica target the bin set (before rounding).
	Provision float64 `json:"prov"`
	// Settled is false when, at some decision in the bin, fewer replicas were
	// ready than the pool's current count (replicas were still starting).
	Settled bool `json:"settled"`
	// Total counts the bin's first tokens that could meet the margin (their
	// prefill fits it); WithinMargin those that met it.
	Total        float64 `json:"total"`
	WithinMargin float64 `json:"margin"`
	// LooseTotal and LooseWithin are the same at the capacity model's slack
	// (marginThreshold): the memory's margin.
	LooseTotal  float64 `json:"looseTotal,omitempty"`
	LooseWithin float64 `json:"looseMargin,omitempty"`
	// Work is the need integrated over the decision intervals that ended in
	// the bin (need-seconds), and Span their length (s): Work/Span is the
	// bin's mean need, the demand log the robust sizing replays.
	Work float64 `json:"work,omitempty"`
	Span float64 `json:"span,omitempty"`
	// ReadyWork is the ready replicas integrated over the same intervals
	// (ReadyWork/Span: the bin's mean ready replicas).
	ReadyWork float64 `json:"readyWork,omitempty"`
	// SLOTotal counts the bin's first tokens that could meet the SLO (their
	// prefill fits it), SLOMisses those among them that missed it.
	SLOTotal  float64 `json:"sloTotal,omitempty"`
	SLOMisses float64 `json:"sloMisses,omitempty"`
}

// state returns a deep copy of the adaptation's state.
func (a *adapter) state() *AdaptiveState {
	s := a.st
	s.Bins = append([]AdaptiveBin(nil), a.st.Bins...)
	s.Capacity = nil
	if a.capacity != nil {
		s.Capacity = a.capacity.state()
	}
	return &s
}

// restore resumes from s (values out of bounds are clamped).
func (a *adapter) restore(s *AdaptiveState) {
	a.st = *s
	a.st.Bins = append([]AdaptiveBin(nil), s.Bins...)
	if a.capacity != nil && s.Capacity != nil {
		a.capacity.restore(s.Capacity)
	}
	a.st.Capacity = nil
	a.clamp()
}
