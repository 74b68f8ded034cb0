package scaleloop

import (
	"math"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// DefaultWindow is the averaging window of a metric that sets none.
const DefaultWindow = time.Minute

// Collector turns per-pod samples into the pool's metric values, per-replica
// where the metric is per replica, each averaged over its averagingWindow.
//
// Missing and stale data follow the HPA: a pod whose scrape failed is left out
// (the per-replica averages and the ReadyReplicas count given to the decision
// are over the reporting pods); a metric no reporting pod exports, or a window
// with no sample younger than StaleAfter, is invalid, and the decision then
// ignores it and does not scale down.
type Collector struct {
	// StaleAfter is how old the newest sample of a window may be (default 3 min).
	StaleAfter time.Duration
	prev       map[string]PodSample
	series     map[scalepolicy.MetricType][]point
	ttft       []histPoint
	ctx        []ctxPoint
}

type point struct {
	t time.Time
	v float64
}

type histPoint struct {
	t time.Time
	h *Histogram
}

type ctxPoint struct {
	t            time.Time
	tokens, reqs float64
}

// Observation is the pool-level result of one collection.
type Observation struct {
	// Metrics are the values for the decision.
	Metrics map[scalepolicy.MetricType]scalepolicy.MetricValue
	// Reporting is how many pods answered.
	Reporting int
	// FirstTokens is the TTFT histogram of the first tokens since the previous
	// collection, summed over the pods (nil when no pod exported a TTFT histogram
	// twice).
	FirstTokens *Histogram
	// Prefills is the prefill-time histogram of the requests prefilled since
	// the previous collection, summed over the pods (nil when no pod exported
	// one twice).
	Prefills *Histogram
	// Capacity is what the pods that exported a prompt-token counter and a
	// prefill-time histogram twice report about the requests they prefilled
	// since the previous collection, for the learned capacity model.
	Capacity scalepolicy.CapacitySample
}

// Observe folds the latest samples (by pod name) in and returns the metric
// values for specs (the implicit ttft-p95 is always computed).
func (c *Collector) Observe(now time.Time, samples map[string]PodSample, specs []scalepolicy.MetricSpec) Observation {
	if c.prev == nil {
		c.prev, c.series = map[string]PodSample{}, map[scalepolicy.MetricType][]point{}
	}
	stale := c.StaleAfter
	if stale <= 0 {
		stale = 3 * time.Minute
	}
	var q, tiq, sess, tps, tools avg
	merged, prefills := &Histogram{}, &Histogram{}
	histOK, prefillOK := false, false
	var dTokens, dReqs, capTokens, capSeconds float64
	for name, s := range samples {
		q.add(s.QueueDepth)
		tiq.add(s.TokensInQueue)
		sess.add(s.Sessions)
		p, hasPrev := c.prev[name]
		dt := s.Time.Sub(p.Time).Seconds()
		switch {
		case !math.IsNaN(s.Tokens) && hasPrev && dt > 0 && s.Tokens >= p.Tokens:
			tps.add((s.Tokens - p.Tokens) / dt)
		case !math.IsNaN(s.TokenGauge):
			tps.add(s.TokenGauge)
		}
		if !math.IsNaN(s.Tools) && hasPrev && dt > 0 && s.Tools >= p.Tools {
			tools.add((s.Tools - p.Tools) / dt * 60)
		}
		if s.TTFT != nil && hasPrev {
			if d := s.TTFT.Sub(p.TTFT); d != nil && merged.Add(d) {
				histOK = true
				if !math.IsNaN(s.Tokens) && s.Tokens >= p.Tokens {
					dTokens += s.Tokens - p.Tokens
					dReqs += d.Count
				}
			}
		}
		if s.Prefill != nil && hasPrev {
			if d := s.Prefill.Sub(p.Prefill); d != nil && prefills.Add(d) {
				prefillOK = true
				if dp := s.PromptTokens - p.PromptTokens; p.Prefill != nil && dp >= 0 && d.Sum > 0 {
					capTokens += dp // NaN (no counter) fails dp >= 0
					capSeconds += d.Sum
				}
			}
		}
		c.prev[name] = s
	}
	for name := range c.prev {
		if _, ok := samples[name]; !ok {
			delete(c.prev, name)
		}
	}
	c.push(scalepolicy.QueueDepth, now, q)
	c.push(scalepolicy.TokensInQueue, now, tiq)
	c.push(scalepolicy.ConcurrentSessions, now, sess)
	c.push(scalepolicy.TokensPerSecond, now, tps)
	c.push(scalepolicy.ToolCallRate, now, tools)
	if histOK {
		c.ttft = append(c.ttft, histPoint{now, merged})
		c.ctx = append(c.ctx, ctxPoint{now, dTokens, dReqs})
	}
	out := Observation{Metrics: map[scalepolicy.MetricType]scalepolicy.MetricValue{}, Reporting: len(samples)}
	if histOK {
		out.FirstTokens = merged
	}
	if prefillOK {
		out.Prefills = prefills
		out.Capacity = scalepolicy.CapacitySample{PromptTokens: capTokens, PrefillSeconds: capSeconds,
			PrefillBounds: prefills.Bounds, PrefillCumulative: prefills.Counts}
	}
	maxW := DefaultWindow
	seenTTFT := false
	for _, sp := range specs {
		w := sp.AveragingWindow
		if w <= 0 {
			w = DefaultWindow
		}
		maxW = max(maxW, w)
		out.Metrics[sp.Type] = c.value(sp.Type, now, w, stale)
		seenTTFT = seenTTFT || sp.Type == scalepolicy.TTFTP95
	}
	if !seenTTFT {
		out.Metrics[scalepolicy.TTFTP95] = c.value(scalepolicy.TTFTP95, now, DefaultWindow, stale)
	}
	c.prune(now, maxW)
	return out
}

func (c *Collector) push(t scalepolicy.MetricType, now time.Time, a avg) {
	if a.n > 0 {
		c.series[t] = append(c.series[t], point{now, a.sum / float64(a.n)})
	}
}

// value averages a metric over w; invalid when nothing fresh is in the window.
func (c *Collector) value(t scalepolicy.MetricType, now time.Time, w, stale time.Duration) scalepolicy.MetricValue {
	from := now.Add(-w)
	switch t {
	case scalepolicy.TTFTP95:
		h := &Histogram{}
		var newest time.Time
		for _, p := range c.ttft {
			if p.t.After(from) && h.Add(p.h) {
				newest = p.t
			}
		}
		v, ok := h.Quantile(0.95)
		return scalepolicy.MetricValue{Value: v, Valid: ok && now.Sub(newest) <= stale}
	case scalepolicy.ContextLength:
		var tok, reqs float64
		for _, p := range c.ctx {
			if p.t.After(from) {
				tok += p.tokens
				reqs += p.reqs
			}
		}
		if reqs == 0 {
			return scalepolicy.MetricValue{}
		}
		return scalepolicy.MetricValue{Value: tok / reqs, Valid: true}
	}
	var a avg
	var newest time.Time
	for _, p := range c.series[t] {
		if p.t.After(from) {
			a.add(p.v)
			newest = p.t
		}
	}
	if a.n == 0 || now.Sub(newest) > stale {
		return scalepolicy.MetricValue{}
	}
	return scalepolicy.MetricValue{Value: a.sum / float64(a.n), Valid: true}
}

func (c *Collector) prune(now time.Time, w time.Duration) {
	from := now.Add(-w)
	for t, ps := range c.series {
		i := 0
		for i < len(ps) && !ps[i].t.After(from) {
			i++
		}
		c.series[t] = ps[i:]
	}
	i := 0
	for i < len(c.ttft) && !c.ttft[i].t.After(from) {
		i++
	}
	c.ttft = c.ttft[i:]
	i = 0
	for i < len(c.ctx) && !c.ctx[i].t.After(from) {
		i++
	}
	c.ctx = c.ctx[i:]
}

// avg averages the non-NaN values added.
type avg struct {
	sum float64
	n   int
}

func (a *avg) add(v float64) {
	if !math.IsNaN(v) {
		a.sum += v
		a.n++
	}
}

// TTFTCounts counts the first tokens of h (nil: none) against the SLO and
// against scalepolicy.AdaptiveMarginRatio x the SLO, for the adaptive policy
// (scalepolicy.HistogramTTFTCounts, which the simulator shares). Both TTFTs
// are raw, as the pods' histograms record them.
func TTFTCounts(h *Histogram, slo time.Duration) scalepolicy.TTFTCounts {
	if h == nil {
		return scalepolicy.TTFTCounts{}
	}
	return scalepolicy.HistogramTTFTCounts(h.Bounds, h.Counts, h.Count, slo)
}

// WaitCounts is TTFTCounts with the prefill times of the same period
// (prefills, nil: unknown), so that the adaptive policy counts only the
// misses caused by waiting.
func WaitCounts(ttft, prefills *Histogram, slo time.Duration) scalepolicy.TTFTCounts {
	c := TTFTCounts(ttft, slo)
	if prefills == nil {
		return c
	}
	return c.WithPrefill(prefills.Bounds, prefills.Counts, slo)
}
