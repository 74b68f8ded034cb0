package scalesim

import (
	"fmt"
	"math"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// InFlight is the baselines' concurrency signal, running plus waiting requests
// per pod, as an external metric (a gateway's in-flight gauge through KEDA's
// Prometheus scaler or an HPA external metric).
const InFlight = scalepolicy.MetricType(scalepolicy.ExternalPrefix + "in-flight")

// Metrics computes the autoscaler's metric values from a View; each metric is
// averaged over its own averagingWindow, per ready replica where the metric is
// per replica. TTFT-p95 is the p95 of raw TTFT, as the cluster's TTFT
// histograms give it.
func Metrics(v View, specs []scalepolicy.MetricSpec, sloOn bool) map[scalepolicy.MetricType]scalepolicy.MetricValue {
	ready := float64(v.Ready())
	if ready == 0 {
		ready = 1 // at zero replicas per-replica metrics are pool totals
	}
	out := map[scalepolicy.MetricType]scalepolicy.MetricValue{}
	if !v.HasSamples() {
		// No sample yet (the first decision): every metric is missing, as a
		// scrape that returned nothing, so the policy holds the count instead
		// of reading an empty window as zero demand.
		return out
	}
	win := func(s scalepolicy.MetricSpec) float64 { return math.Max(s.AveragingWindow.Seconds(), 1) }
	add := func(s scalepolicy.MetricSpec) {
		w := win(s)
		switch s.Type {
		case scalepolicy.TokensInQueue:
			out[s.Type] = scalepolicy.MetricValue{Value: v.WaitingTokens(w) / ready, Valid: true}
		case scalepolicy.QueueDepth:
			out[s.Type] = scalepolicy.MetricValue{Value: v.Waiting(w) / ready, Valid: true}
		case scalepolicy.ConcurrentSessions:
			out[s.Type] = scalepolicy.MetricValue{Value: v.Sessions(w) / ready, Valid: true}
		case InFlight:
			out[s.Type] = scalepolicy.MetricValue{Value: v.Concurrency(w) / ready, Valid: true}
		case scalepolicy.TokensPerSecond:
			out[s.Type] = scalepolicy.MetricValue{Value: v.TokenRate(w) / ready, Valid: true}
		case scalepolicy.TTFTP95:
			val, ok := v.TTFTP95(w)
			out[s.Type] = scalepolicy.MetricValue{Value: val, Valid: ok}
		case scalepolicy.ContextLength:
			val, ok := v.ContextLength(w)
			out[s.Type] = scalepolicy.MetricValue{Value: val, Valid: ok}
		case scalepolicy.ToolCallRate:
			out[s.Type] = scalepolicy.MetricValue{Valid: false} // no tool calls in LLM traces
		}
	}
	hasTTFT := false
	for _, s := range specs {
		add(s)
		hasTTFT = hasTTFT || s.Type == scalepolicy.TTFTP95
	}
	if sloOn && !hasTTFT {
		add(scalepolicy.MetricSpec{Type: scalepolicy.TTFTP95, AveragingWindow: 30 * time.Second})
	}
	return out
}

// Decider runs the decision package on a View: NeuroNetes, and the HPA and KEDA
// baselines whose algorithms the package reproduces with their defaults.
type Decider struct {
	// Label names the policy.
	Label string
	// Every is the decision period.
	Every time.Duration
	// Policy is the decision package's policy.
	Policy scalepolicy.Policy
	// Warm, ReplenishDelay and ReplenishBatch configure the warm pool (0: none).
	Warm           int
	ReplenishDelay time.Duration
	ReplenishBatch int
	// KEDA adds KEDA's 0<->1 activation: active while the metric is > Activation,
	// deactivated to zero after CooldownPeriod without activity, checked every
	// PollingInterval.
	KEDA *KEDAActivation
	// Offered feeds the policy the offered demand (Input.Offered), as the
	// controller does when it reads the gateway's per-pool view.
	Offered bool

	a      *scalepolicy.Autoscaler
	last   scalepolicy.Decision
	learn  Learned
	lastAt float64 // when the last decision was made
	active bool
	lastOn float64
	polled float64
}

// KEDAActivation is KEDA's own 0<->1 scaling around the HPA.
type KEDAActivation struct {
	// Activation is the activation threshold (KEDA default 0).
	Activation float64
	// CooldownPeriod is how long after the last activity the pool goes to zero (300 s).
	CooldownPeriod time.Duration
	// PollingInterval is how often the scaler is polled (30 s).
	PollingInterval time.Duration
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Name implements Policy.
func (d *Decider) Name() string { return d.Label }

// Interval implements Policy.
func (d *Decider) Interval() time.Duration { return d.Every }

// WarmPool implements WarmPooled.
func (d *Decider) WarmPool() (int, time.Duration, int) {
	return d.Warm, d.ReplenishDelay, d.ReplenishBatch
}

// Last returns the latest decision.
func (d *Decider) Last() scalepolicy.Decision { return d.last }

// Decide implements Policy.
func (d *Decider) Decide(v View) int {
	if d.a == nil {
		a, err := scalepolicy.New(d.Policy)
		if err != nil {
			panic(fmt.Sprintf("sim: policy %s: %v", d.Label, err))
		}
		d.a = a
		d.polled = math.Inf(-1)
		// A running ScaledObject starts active; the cooldown counts from now.
		d.active, d.lastOn = v.Target() > 0, v.Now()
		d.lastAt = v.Now() - d.Every.Seconds()
	}
	m := Metrics(v, d.Policy.Metrics, d.Policy.SLO.Enabled)
	cur := v.Target()
	if d.KEDA != nil && v.Now()-d.polled >= d.KEDA.PollingInterval.Seconds() {
		d.polled = v.Now()
		total := v.Concurrency(1)
		if total > d.KEDA.Activation {
			d.active, d.lastOn = true, v.Now()
		} else if d.active && v.Now()-d.lastOn >= d.KEDA.CooldownPeriod.Seconds() {
			d.active = false
		}
		if !d.active {
			return 0
		}
		if cur == 0 {
			return 1
		}
	}
	if d.KEDA != nil && cur == 0 {
		return 0
	}
	counts := v.TTFTCounts(v.Now() - d.lastAt)
	capacity := v.CapacitySample(v.Now() - d.lastAt)
	d.lastAt = v.Now()
	d.last = d.a.Decide(scalepolicy.Input{
		Now: epoch.Add(time.Duration(v.Now() * float64(time.Second))), CurrentReplicas: int32(cur),
		ReadyReplicas: int32(v.Ready()), WarmReplicas: int32(v.Warm()), Metrics: m, QueueLag: -1, TTFT: counts,
		Offered: d.offered(v), Capacity: capacity,
	})
	if h, mem, ok := d.a.Learned(); ok && v.Now() >= v.c.m.Warmup.Seconds() {
		d.learn.add(h, mem)
	}
	return int(d.last.Desired)
}

// Learned summarizes an adaptive policy's learned headroom and memory over
// the evaluated part of a run: what its cost comes from.
type Learned struct {
	// Decisions counts the decisions summarized (0: not adaptive).
	Decisions int
	// MeanHeadroom, MaxHeadroom and EndHeadroom describe the headroom.
	MeanHeadroom, MaxHeadroom, EndHeadroom float64
	// MeanMemory and EndMemory describe the memory.
	MeanMemory, EndMemory time.Duration
	sumMem                float64
}

func (l *Learned) add(h float64, m time.Duration) {
	l.Decisions++
	l.MeanHeadroom += (h - l.MeanHeadroom) / float64(l.Decisions)
	l.sumMem += m.Seconds()
	l.MeanMemory = time.Duration(l.sumMem / float64(l.Decisions) * float64(time.Second))
	l.MaxHeadroom, l.EndHeadroom, l.EndMemory = math.Max(l.MaxHeadroom, h), h, m
}

// Learned returns the summary of the last run (valid after Run).
func (d *Decider) Learned() Learned { return d.learn }

// String describes the summary.
func (l Learned) String() string {
	if l.Decisions == 0 {
		return "not adaptive"
	}
	return fmt.Sprintf("headroom mean %.2f (max %.2f, end %.2f), memory mean %s (end %s)", l.MeanHeadroom, l.MaxHeadroom,
		l.EndHeadroom, l.MeanMemory.Round(time.Second), l.EndMemory.Round(time.Second))
}

// offered is the offered demand over the tokens-per-second metric's window,
// as the gateway's per-pool view gives it, when the Decider measures it.
func (d *Decider) offered(v View) scalepolicy.OfferedDemand {
	if !d.Offered {
		return scalepolicy.OfferedDemand{}
	}
	w := 10.0
	for _, s := range d.Policy.Metrics {
		if s.Type == scalepolicy.TokensPerSecond {
			w = math.Max(s.AveragingWindow.Seconds(), 1)
		}
	}
	tps, ok := v.OfferedPromptTokens(w)
	return scalepolicy.OfferedDemand{Valid: ok, PromptTokensPerSecond: tps}
}
