package scalepolicy

import (
	"math"
	"time"
)

// CapacitySample is what the pool's pods reported, since the previous
// decision, about the requests they prefilled: the increase of a prompt-token
// counter (vllm:prompt_tokens_total) and of a prefill-time histogram
// (vllm:request_prefill_time_seconds, neuronetes_prefill_seconds), summed
// over the pods. The zero value reports nothing.
type CapacitySample struct {
	// PromptTokens are the prompt tokens prefilled.
	PromptTokens float64
	// PrefillSeconds is the sum of those requests' prefill times (the
	// histogram's _sum increase).
	PrefillSeconds float64
	// PrefillBounds are the prefill histogram's bucket bounds (seconds, +Inf
	// last) and PrefillCumulative its cumulative count increase per bound;
	// nil when unknown.
	PrefillBounds, PrefillCumulative []float64
}

// CapacityState is the capacity model's learned state, serializable with the
// adaptive state.
type CapacityState struct {
	// Tokens and Seconds are the prompt tokens and prefill seconds observed,
	// each weighted by e^-(age/capacityTau).
	Tokens  float64 `json:"tokens"`
	Seconds float64 `json:"seconds"`
	// Bounds are the prefill histogram's bounds, Counts its bucket counts
	// (not cumulative), weighted likewise.
	Bounds []float64 `json:"bounds,omitempty"`
	Counts []float64 `json:"counts,omitempty"`
	// Offered are the offered prompt tokens per adaptBin, oldest first.
	Offered []OfferedBin `json:"offered,omitempty"`
	// Last is the time of the last observation.
	Last time.Time `json:"last,omitzero"`
	// Now is the offered prompt tokens per second of the last observation.
	Now float64 `json:"now,omitempty"`
}

// OfferedBin is the offered prompt tokens of one adaptBin.
type OfferedBin struct {
	// Index is the bin's start in bin widths since the Unix epoch.
	Index int64 `json:"i"`
	// Tokens are the prompt tokens offered over the decision intervals
	// that ended in the bin, and Seconds those intervals' length.
	Tokens  float64 `json:"tokens"`
	Seconds float64 `json:"seconds"`
}

// The capacity model's constants, in the units of the adaptation.
const (
	// capacityTau is how long the model remembers: the adaptation's shrink
	// time constant, so both forget alike.
	capacityTau = shrinkTau
	// capacityMinSeconds is the prefill time observed before the learned
	// rate replaces the configured one: one replica busy for one bin.
	capacityMinSeconds = 10.0
	// capacityWindows is the longest window the need looks back over.
	capacityWindows = 32
)

// CapacityModel learns one replica's capacity at the SLO from what the pods
// report: its prefill rate (prompt tokens per prefill second) and the wait a
// request can afford within the SLO (Allowance: from the prefill time all but
// the error budget's share of requests stay within). It turns the offered
// prompt tokens into the replicas that serve them within the SLO: for each
// window w of the recent past, the tokens offered in w / (rate x (w +
// allowance)), the largest over the offered rate now (as over one bin) and w
// in 1, 2, 4 ... capacityWindows bins. A burst shorter than the allowance can
// wait; a lasting load needs its mean.
// It is pure: every method takes the time it is called at.
type CapacityModel struct {
	slo    time.Duration
	budget float64
	prior  float64
	st     CapacityState
}

// NewCapacityModel returns a model for an SLO, an error budget (the share of
// requests that may miss) and a configured prefill rate used until one is
// learned (0: none).
func NewCapacityModel(slo time.Duration, budget, priorTPS float64) *CapacityModel {
	return &CapacityModel{slo: slo, budget: budget, prior: priorTPS}
}

// Observe folds in the sample of the interval ending at now and the offered
// prompt tokens per second over it (offered false: not measured).
func (m *CapacityModel) Observe(now time.Time, s CapacitySample, offeredTPS float64, offered bool) {
	st := &m.st
	dt := 0.0
	if !st.Last.IsZero() && now.After(st.Last) {
		dt = now.Sub(st.Last).Seconds()
	}
	st.Last = now
	k := math.Exp(-dt / capacityTau.Seconds())
	st.Tokens, st.Seconds = st.Tokens*k, st.Seconds*k
	for i := range st.Counts {
		st.Counts[i] *= k
	}
	if s.PromptTokens > 0 && s.PrefillSeconds > 0 {
		st.Tokens += s.PromptTokens
		st.Seconds += s.PrefillSeconds
	}
	m.addHistogram(s.PrefillBounds, s.PrefillCumulative)
	st.Now = 0
	if offered {
		st.Now = offeredTPS
		if dt > 0 {
			m.addOffered(now, offeredTPS*dt, dt)
		}
	}
}

func (m *CapacityModel) addHistogram(bounds, cum []float64) {
	if len(bounds) == 0 || len(bounds) != len(cum) {
		return
	}
	st := &m.st
	// +Inf is kept as math.MaxFloat64, which JSON can carry.
	finite := make([]float64, len(bounds))
	for i, b := range bounds {
		finite[i] = math.Min(b, math.MaxFloat64)
	}
	if !equalBounds(st.Bounds, finite) {
		st.Bounds = finite
		st.Counts = make([]float64, len(bounds))
	}
	prev := 0.0
	for i, c := range cum {
		st.Counts[i] += math.Max(c-prev, 0)
		prev = math.Max(c, prev)
	}
}

func equalBounds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// addOffered adds the tokens of an interval of dt seconds to the bin of now,
// pruning bins older than the longest window.
func (m *CapacityModel) addOffered(now time.Time, tokens, dt float64) {
	i := binIndex(now)
	bs := m.st.Offered
	if n := len(bs); n > 0 && bs[n-1].Index == i {
		bs[n-1].Tokens += tokens
		bs[n-1].Seconds += dt
		return
	}
	keep := 0
	for keep < len(bs) && bs[keep].Index <= i-capacityWindows {
		keep++
	}
	m.st.Offered = append(bs[keep:], OfferedBin{Index: i, Tokens: tokens, Seconds: dt})
}

// PrefillTPS is one replica's prefill rate: the learned one once
// capacityMinSeconds of prefill were observed (learned true), else the prior.
func (m *CapacityModel) PrefillTPS() (tps float64, learned bool) {
	if m.st.Seconds >= capacityMinSeconds && m.st.Tokens > 0 {
		return m.st.Tokens / m.st.Seconds, true
	}
	return m.prior, false
}

// Allowance is the wait the pool is sized to let a request take:
// AdaptiveMarginRatio x the slack the SLO leaves after the (1 - budget)
// quantile of the prefill times observed (interpolated within its bucket), at
// least 0; without a prefill histogram, AdaptiveMarginRatio x the SLO. Half
// the slack, not all of it: the adaptation shrinks its headroom only while the
// first tokens keep within AdaptiveMarginRatio x the SLO, so a pool sized for
// waits up to the whole slack would never see that margin (measured: the
// headroom on Mooncake synthetic stayed at 0.98 for the whole trace).
func (m *CapacityModel) Allowance() time.Duration {
	q, ok := m.prefillQuantile(1 - m.budget)
	if !ok {
		return time.Duration(AdaptiveMarginRatio * float64(m.slo))
	}
	return time.Duration(AdaptiveMarginRatio * float64(max(m.slo-time.Duration(q*float64(time.Second)), 0)))
}

// QueueDrain is the prompt tokens one replica prefills within the slack the
// SLO leaves a request at the model's prefill quantile: the prefill rate x
// (SLO - the (1 - budget) quantile of the prefill times), the queue one
// replica serves before the requests in it run out of slack. ok is false
// without a prefill histogram or a rate.
func (m *CapacityModel) QueueDrain() (tokens float64, ok bool) {
	tps, _ := m.PrefillTPS()
	q, ok := m.prefillQuantile(1 - m.budget)
	if !ok || tps <= 0 {
		return 0, false
	}
	return tps * math.Max(m.slo.Seconds()-q, 0), true
}

// prefillQuantile interpolates the q-quantile of the prefill histogram; a
// quantile in the +Inf bucket (stored as math.MaxFloat64) is its lower bound.
func (m *CapacityModel) prefillQuantile(q float64) (float64, bool) {
	st := m.st
	total := 0.0
	for _, c := range st.Counts {
		total += c
	}
	if total <= 0 {
		return 0, false
	}
	rank, cum, lo := q*total, 0.0, 0.0
	for i, c := range st.Counts {
		hi := st.Bounds[i]
		inf := hi >= math.MaxFloat64
		if cum+c >= rank && c > 0 {
			if inf {
				return lo, true
			}
			return lo + (hi-lo)*(rank-cum)/c, true
		}
		cum += c
		if !inf {
			lo = hi
		}
	}
	return lo, true
}

// Need is the replicas that serve the offered prompt tokens within the SLO at
// now: the largest, over windows of the last 1, 2, 4 ... capacityWindows bins,
// of the tokens offered in the window / (rate x (the window's observed
// seconds + allowance)). ok is false without an offered bin or a rate.
func (m *CapacityModel) Need(now time.Time) (need float64, ok bool) {
	tps, _ := m.PrefillTPS()
	bs := m.st.Offered
	if tps <= 0 || len(bs) == 0 {
		return 0, false
	}
	hi := binIndex(now)
	allow := m.Allowance().Seconds()
	// The offered rate measured now, taken as over one bin: a burst shorter
	// than a bin shows here at its height, not averaged into its bin.
	need = m.st.Now * adaptBin.Seconds() / (tps * (adaptBin.Seconds() + allow))
	tokens, span, j := 0.0, 0.0, len(bs)-1
	for w := int64(1); w <= capacityWindows; w *= 2 {
		for ; j >= 0 && bs[j].Index > hi-w; j-- {
			tokens += bs[j].Tokens
			span += bs[j].Seconds
		}
		if span > 0 {
			need = math.Max(need, tokens/(tps*(span+allow)))
		}
	}
	return need, true
}

// state returns a deep copy of the model's state.
func (m *CapacityModel) state() *CapacityState {
	s := m.st
	s.Bounds = append([]float64(nil), m.st.Bounds...)
	s.Counts = append([]float64(nil), m.st.Counts...)
	s.Offered = append([]OfferedBin(nil), m.st.Offered...)
	return &s
}

// restore resumes from s.
func (m *CapacityModel) restore(s *CapacityState) {
	m.st = *s
	m.st.Bounds = append([]float64(nil), s.Bounds...)
	m.st.Counts = append([]float64(nil), s.Counts...)
	m.st.Offered = append([]OfferedBin(nil), s.Offered...)
	if len(m.st.Counts) != len(m.st.Bounds) {
		m.st.Bounds, m.st.Counts = nil, nil
	}
}
