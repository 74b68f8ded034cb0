package scaleloop

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// PodSample is what one scrape of one pod yields: gauges as they are, counters
// and histograms cumulative (rates come from two samples).
type PodSample struct {
	// Time is when the scrape finished.
	Time time.Time
	// QueueDepth, TokensInQueue and Sessions are gauges; NaN when not exported.
	QueueDepth, TokensInQueue, Sessions float64
	// Tokens is the cumulative token counter (NaN if none); TokenGauge a
	// throughput gauge (NaN if none).
	Tokens, TokenGauge float64
	// TTFT is the cumulative TTFT histogram (nil if none).
	TTFT *Histogram
	// Prefill is the cumulative prefill-time histogram (nil if none).
	Prefill *Histogram
	// PromptTokens is the cumulative prompt-token counter (NaN if none).
	PromptTokens float64
	// Tools is the cumulative tool-latency histogram count (NaN if none).
	Tools float64
}

// Histogram is a cumulative histogram: upper bounds ascending and cumulative counts.
type Histogram struct {
	// Bounds are the bucket upper bounds, +Inf last.
	Bounds []float64
	// Counts are the cumulative counts per bound.
	Counts []float64
	// Count and Sum are the totals.
	Count, Sum float64
}

// ParseMetrics reads a Prometheus text exposition and extracts the pool metrics.
func ParseMetrics(r io.Reader, now time.Time) (PodSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return PodSample{}, fmt.Errorf("parse metrics: %w", err)
	}
	s := PodSample{Time: now, QueueDepth: gauge(fams, queueDepthNames), TokensInQueue: gauge(fams, tokensInQueueNames),
		Sessions: gauge(fams, sessionNames), TokenGauge: gauge(fams, tokenGaugeNames), Tokens: math.NaN(), Tools: math.NaN(),
		PromptTokens: gauge(fams, promptTokenNames)}
	for _, names := range tokenCounterNames {
		sum, found := 0.0, false
		for _, n := range names {
			if v := sumValues(fams[n]); !math.IsNaN(v) {
				sum, found = sum+v, true
			}
		}
		if found {
			s.Tokens = sum
			break
		}
	}
	for _, n := range ttftNames {
		if h := histogram(fams[n]); h != nil {
			s.TTFT = h
			break
		}
	}
	for _, n := range prefillNames {
		if h := histogram(fams[n]); h != nil {
			s.Prefill = h
			break
		}
	}
	for _, n := range toolNames {
		if h := histogram(fams[n]); h != nil {
			s.Tools = h.Count
			break
		}
	}
	return s, nil
}

func gauge(fams map[string]*dto.MetricFamily, names []string) float64 {
	for _, n := range names {
		if v := sumValues(fams[n]); !math.IsNaN(v) {
			return v
		}
	}
	return math.NaN()
}

// sumValues sums a gauge, counter or untyped family over its label sets.
func sumValues(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		switch {
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// histogram merges a histogram family over its label sets (same buckets assumed;
// differing bounds are merged by bound).
func histogram(f *dto.MetricFamily) *Histogram {
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	byBound := map[float64]float64{}
	h := &Histogram{}
	for _, m := range f.GetMetric() {
		mh := m.GetHistogram()
		h.Count += float64(mh.GetSampleCount())
		h.Sum += mh.GetSampleSum()
		for _, b := range mh.GetBucket() {
			byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
		byBound[math.Inf(1)] = h.Count
	}
	for b := range byBound {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, byBound[b])
	}
	return h
}

// Sub returns the histogram of observations between prev and h (nil if the
// buckets differ or a counter was reset).
func (h *Histogram) Sub(prev *Histogram) *Histogram {
	if prev == nil {
		return h
	}
	if len(prev.Bounds) != len(h.Bounds) || h.Count < prev.Count {
		return nil
	}
	out := &Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Count: h.Count - prev.Count, Sum: h.Sum - prev.Sum}
	for i := range h.Counts {
		if h.Bounds[i] != prev.Bounds[i] {
			return nil
		}
		out.Counts[i] = h.Counts[i] - prev.Counts[i]
	}
	return out
}

// Add accumulates o into h (same bounds required); returns false if they differ.
func (h *Histogram) Add(o *Histogram) bool {
	if len(h.Bounds) == 0 {
		h.Bounds = append([]float64(nil), o.Bounds...)
		h.Counts = make([]float64, len(o.Counts))
	}
	if len(h.Bounds) != len(o.Bounds) {
		return false
	}
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Count += o.Count
	h.Sum += o.Sum
	return true
}

// Quantile estimates the q-quantile like PromQL's histogram_quantile: linear
// interpolation within the bucket, the lower bound of the +Inf bucket beyond the
// last finite bound. ok is false with no observations.
func (h *Histogram) Quantile(q float64) (float64, bool) {
	if h == nil || h.Count <= 0 || len(h.Bounds) == 0 {
		return 0, false
	}
	rank := q * h.Count
	prevBound, prevCount := 0.0, 0.0
	for i, b := range h.Bounds {
		c := h.Counts[i]
		if c >= rank {
			if math.IsInf(b, 1) {
				return prevBound, true
			}
			if c == prevCount {
				return b, true
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(c-prevCount), true
		}
		prevBound, prevCount = b, c
	}
	return prevBound, true
}

// CountAtOrBelow estimates how many observations were at or below x, with
// linear interpolation within the bucket that holds x (PromQL's
// histogram_fraction times the count); beyond the last finite bound, every
// observation up to that bound counts and none of the +Inf bucket does. The
// arithmetic is scalepolicy.CountAtOrBelow, which the simulator shares.
func (h *Histogram) CountAtOrBelow(x float64) float64 {
	return scalepolicy.CountAtOrBelow(h.Bounds, h.Counts, x)
}

// Scraper fetches /metrics from pods.
type Scraper struct {
	// Client is the HTTP client (with a timeout).
	Client *http.Client
}

// Scrape GETs url and parses it.
func (s Scraper) Scrape(ctx context.Context, url string) (PodSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return PodSample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second, CheckRedirect: noRedirect}
	}
	resp, err := c.Do(req)
	if err != nil {
		return PodSample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return PodSample{}, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	ps, err := ParseMetrics(resp.Body, time.Now())
	if err != nil {
		return PodSample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	return ps, nil
}
