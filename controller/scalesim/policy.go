package scalesim

import (
	"math"
	"sort"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// View is what a policy observes at a decision tick: the pool's state and its
// recent per-second samples, like a metrics pipeline would show it.
type View struct{ c *cluster }

// Now is the simulated time in seconds.
func (v View) Now() float64 { return v.c.now }

// HasSamples reports whether at least one per-second sample was recorded.
func (v View) HasSamples() bool { return len(v.c.samples) > 0 }

// Ready is the number of serving replicas (ready and not draining).
func (v View) Ready() int { return v.c.count(serving) }

// Target is the current serving target.
func (v View) Target() int { return v.c.target }

// Warm is the number of warm replicas ready to activate.
func (v View) Warm() int { return v.c.count(warm) }

// Concurrency is the pool-wide average of running plus waiting requests over w seconds.
func (v View) Concurrency(w float64) float64 {
	return v.c.avg(w, func(s sample) float64 { return s.running + s.waiting })
}

// Running is the pool-wide average of sequences in a replica (prefilling or
// decoding) over w seconds.
func (v View) Running(w float64) float64 {
	return v.c.avg(w, func(s sample) float64 { return s.running })
}

// Sessions is the pool-wide average of the concurrent-sessions metric over w
// seconds: running sequences, or no conversations (Model.Sessions).
func (v View) Sessions(w float64) float64 {
	if v.c.m.Sessions == SessionsConversations {
		return 0
	}
	return v.Running(w)
}

// Waiting is the pool-wide average of waiting requests over w seconds.
func (v View) Waiting(w float64) float64 {
	return v.c.avg(w, func(s sample) float64 { return s.waiting })
}

// WaitingTokens is the pool-wide average of unprefilled prompt tokens over w seconds.
func (v View) WaitingTokens(w float64) float64 {
	return v.c.avg(w, func(s sample) float64 { return s.waitingTokens })
}

// TokenRate is the pool-wide prompt plus generated tokens per second over w
// seconds, counted as they are processed (prefilled or generated), as the
// model servers' token counters count them: it never exceeds what the ready
// replicas can process.
func (v View) TokenRate(w float64) float64 {
	return v.c.avg(w, func(s sample) float64 { return s.prefilled + s.genTok })
}

// OfferedPromptTokens is the prompt tokens of the requests that arrived, per
// second over the last w seconds, counted at arrival as a gateway counts them
// (scalepolicy.OfferedDemand); ok is false before the first sample.
func (v View) OfferedPromptTokens(w float64) (float64, bool) {
	if !v.HasSamples() {
		return 0, false
	}
	return v.c.avg(w, func(s sample) float64 { return s.promptTokens }), true
}

// ContextLength is the average prompt length of requests arriving within w seconds.
func (v View) ContextLength(w float64) (float64, bool) {
	a := v.c.avg(w, func(s sample) float64 { return s.arrivals })
	if a == 0 {
		return 0, false
	}
	return v.c.avg(w, func(s sample) float64 { return s.promptTokens }) / a, true
}

// TTFTP95 is the 95th percentile raw TTFT of the first tokens of the last w
// seconds; ok is false when none came.
func (v View) TTFTP95(w float64) (float64, bool) { return v.c.ttftQuantile(0.95, w) }

// TTFTQuantile is the q-quantile raw TTFT of the first tokens of the last w
// seconds; ok is false when none came.
func (v View) TTFTQuantile(q, w float64) (float64, bool) { return v.c.ttftQuantile(q, w) }

// WaitQuantile is the q-quantile of the queueing delay (TTFT minus prefill
// time) of the first tokens of the last w seconds; ok is false when none came.
func (v View) WaitQuantile(q, w float64) (float64, bool) {
	return v.c.quantile(q, w, func(e ttftEvent) float64 { return e.ttft - e.prefill })
}

// SlackQuantile is the q-quantile, over the first tokens of the last w
// seconds, of the share of its SLO slack (SLO minus its prefill time) that a
// request spent waiting; a request misses the SLO exactly when its share
// exceeds 1. ok is false when none came.
func (v View) SlackQuantile(q, w float64) (float64, bool) {
	slo := v.c.m.SLO.Seconds()
	return v.c.quantile(q, w, func(e ttftEvent) float64 {
		return (e.ttft - e.prefill) / math.Max(slo-e.prefill, 1e-3)
	})
}

// PrefillQuantile is the q-quantile of the prefill time (the unloaded TTFT)
// of the first tokens of the last w seconds, as vLLM's
// request_prefill_time_seconds histogram gives it; ok is false when none came.
func (v View) PrefillQuantile(q, w float64) (float64, bool) {
	return v.c.quantile(q, w, func(e ttftEvent) float64 { return e.prefill })
}

// SLOCounts counts the first tokens of the last w seconds and those within the
// SLO, as a TTFT histogram with a bucket bound at the SLO would.
func (v View) SLOCounts(w float64) (within, total int) { return v.c.sloCounts(w) }

// TTFTCounts counts the first tokens of the last w seconds, and their own
// prefill times, against the SLO and against scalepolicy.AdaptiveMarginRatio
// x the SLO: exactly (as a gateway that pairs each request's TTFT with its
// prefill time would), or, with
// Model.TTFTBuckets, through a histogram of those bounds as the controller
// counts a scraped one.
func (v View) TTFTCounts(w float64) scalepolicy.TTFTCounts {
	slo := v.c.m.SLO.Seconds()
	es := v.c.recentTTFTs(w)
	if bounds := v.c.m.TTFTBuckets; len(bounds) > 0 {
		all := append(bounds[:len(bounds):len(bounds)], math.Inf(1))
		cumulative := func(f func(ttftEvent) float64) []float64 {
			cum := make([]float64, len(all))
			for _, e := range es {
				// Prometheus buckets count an observation at or below each bound.
				for i := sort.SearchFloat64s(bounds, f(e)); i < len(cum); i++ {
					cum[i]++
				}
			}
			return cum
		}
		out := scalepolicy.HistogramTTFTCounts(all, cumulative(func(e ttftEvent) float64 { return e.ttft }), float64(len(es)), v.c.m.SLO)
		return out.WithPrefill(all, cumulative(func(e ttftEvent) float64 { return e.prefill }), v.c.m.SLO)
	}
	out := scalepolicy.TTFTCounts{PrefillKnown: true}
	margin := scalepolicy.AdaptiveMarginRatio * slo
	for _, e := range es {
		out.Total++
		if e.ttft <= slo+1e-9 {
			out.WithinSLO++
		}
		if e.ttft <= margin+1e-9 {
			out.WithinMargin++
		}
		if e.prefill <= slo+1e-9 {
			out.PrefillWithinSLO++
		}
		if e.prefill <= margin+1e-9 {
			out.PrefillWithinMargin++
		}
	}
	out.TTFTs = exactCumulative(es, func(e ttftEvent) float64 { return e.ttft })
	out.Prefills = exactCumulative(es, func(e ttftEvent) float64 { return e.prefill })
	return out
}

// PrefillBuckets are the bounds (seconds) of the prefill-time histogram the
// simulated pods export: vLLM's request_prefill_time_seconds buckets, which
// the demo agent uses too.
var PrefillBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
	120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

// CapacitySample is what the pods report about the requests whose first token
// came in the last w seconds, as the controller reads it from their
// prompt-token counter and prefill-time histogram (PrefillBuckets).
func (v View) CapacitySample(w float64) scalepolicy.CapacitySample {
	es := v.c.recentTTFTs(w)
	bounds := append(PrefillBuckets[:len(PrefillBuckets):len(PrefillBuckets)], math.Inf(1))
	s := scalepolicy.CapacitySample{PrefillBounds: bounds, PrefillCumulative: make([]float64, len(bounds))}
	for _, e := range es {
		s.PromptTokens += e.tokens
		s.PrefillSeconds += e.prefill
		for i := sort.SearchFloat64s(PrefillBuckets, e.prefill); i < len(bounds); i++ {
			s.PrefillCumulative[i]++
		}
	}
	return s
}

// Policy is an autoscaler under evaluation.
type Policy interface {
	// Name labels the policy in reports.
	Name() string
	// Interval is the decision period.
	Interval() time.Duration
	// Decide returns the serving replica target.
	Decide(v View) int
}

// WarmPooled is implemented by policies that keep a warm pool.
type WarmPooled interface {
	// WarmPool returns the warm replicas to keep and the replenish delay and batch.
	WarmPool() (replicas int, delay time.Duration, batch int)
}

// KPA is Knative's Pod Autoscaler with its documented defaults: a 60 s stable
// window, a 6 s panic window (10%), panic at 200% of target, no scale-down
// while panicking, a 2 s tick, max scale-up rate 1000 and scale-down rate 2,
// scale to zero after the stable window plus a 30 s grace period. Concurrency
// target = containerConcurrency (Slots) x target utilization (70%).
type KPA struct {
	// Target is the per-pod concurrency target.
	Target float64
	// MinScale, MaxScale bound the pod count (Knative default min 0).
	MinScale, MaxScale int

	panicStart, lastNonZero float64
	maxPanicPods            int
	panicking               bool
}

// Name implements Policy.
func (k *KPA) Name() string { return "knative-kpa" }

// Interval implements Policy.
func (k *KPA) Interval() time.Duration { return 2 * time.Second }

// Decide implements Policy.
func (k *KPA) Decide(v View) int {
	const stable, panicW, panicThreshold, upRate, downRate, grace = 60.0, 6.0, 2.0, 1000.0, 2.0, 30.0
	ready := float64(max(v.Ready(), 1))
	obsStable, obsPanic := v.Concurrency(stable), v.Concurrency(panicW)
	dStable := int(math.Ceil(obsStable / k.Target))
	dPanic := int(math.Ceil(obsPanic / k.Target))
	maxUp, maxDown := int(math.Ceil(upRate*ready)), int(math.Floor(ready/downRate))
	clampI := func(x int) int { return max(maxDown, min(x, maxUp)) }
	if v.Ready() == 0 {
		// At zero the activator holds requests; any demand activates.
		maxDown = 0
	}
	dStable, dPanic = clampI(dStable), clampI(dPanic)
	over := obsPanic/ready >= k.Target*panicThreshold
	switch {
	case !k.panicking && over:
		k.panicking, k.panicStart = true, v.Now()
	case k.panicking && over:
		k.panicStart = v.Now()
	case k.panicking && v.Now()-k.panicStart >= stable:
		k.panicking, k.maxPanicPods = false, 0
	}
	want := dStable
	if k.panicking {
		want = max(dPanic, k.maxPanicPods, v.Target())
		k.maxPanicPods = want
	}
	if want > 0 {
		k.lastNonZero = v.Now()
	} else if v.Now()-k.lastNonZero < stable+grace {
		want = 1
	}
	return max(k.MinScale, min(want, k.MaxScale))
}

// APA is AIBrix's Autoscaling Pod Autoscaler: a ±10% fluctuation band around
// the per-pod target, at most 2x up or down per decision, no scale-up delay and
// a 300 s scale-down cooldown, evaluated every 15 s on the current per-pod value.
type APA struct {
	// Target is the per-pod metric target (concurrency).
	Target float64
	// MinReplicas, MaxReplicas bound the pod count.
	MinReplicas, MaxReplicas int

	lastScale float64
	scaled    bool
}

// Name implements Policy.
func (a *APA) Name() string { return "aibrix-apa" }

// Interval implements Policy.
func (a *APA) Interval() time.Duration { return 15 * time.Second }

// Decide implements Policy.
func (a *APA) Decide(v View) int {
	const tol, upRate, downRate, downDelay = 0.1, 2.0, 2.0, 300.0
	cur := v.Target()
	ready := float64(max(v.Ready(), 1))
	ratio := v.Concurrency(1) / ready / a.Target
	want := cur
	switch {
	case ratio > 1+tol:
		want = min(int(math.Ceil(ready*ratio)), int(math.Ceil(float64(max(cur, 1))*upRate)))
		want = max(want, cur)
	case ratio < 1-tol && (!a.scaled || v.Now()-a.lastScale >= downDelay):
		want = max(int(math.Ceil(ready*ratio)), int(math.Ceil(float64(cur)/downRate)))
		want = min(want, cur)
	}
	want = max(a.MinReplicas, min(want, a.MaxReplicas))
	if want != cur {
		a.lastScale, a.scaled = v.Now(), true
	}
	return want
}

// Oracle follows a precomputed replica curve that looks ahead by the cold start.
type Oracle struct {
	curve []int // replicas per second
}

// Name implements Policy.
func (o *Oracle) Name() string { return "oracle" }

// Interval implements Policy.
func (o *Oracle) Interval() time.Duration { return time.Second }

// Decide implements Policy.
func (o *Oracle) Decide(v View) int {
	i := int(v.Now())
	if i >= len(o.curve) {
		return o.curve[len(o.curve)-1]
	}
	return o.curve[i]
}

// exactCumulative holds every value of es as a bound of an exact cumulative
// histogram, so the adaptive policy can count its margin at any threshold.
func exactCumulative(es []ttftEvent, f func(ttftEvent) float64) *scalepolicy.Cumulative {
	vs := make([]float64, len(es))
	for i, e := range es {
		vs[i] = f(e)
	}
	sort.Float64s(vs)
	counts := make([]float64, len(vs))
	for i := range counts {
		counts[i] = float64(i + 1)
	}
	return &scalepolicy.Cumulative{Bounds: vs, Counts: counts, Exact: true}
}
