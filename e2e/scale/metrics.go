package scale

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scheduler metric names the benchmark reads.
const (
	MetricAttempt   = "scheduler_scheduling_attempt_duration_seconds"
	MetricAlgorithm = "scheduler_scheduling_algorithm_duration_seconds"
	MetricPlugin    = "scheduler_plugin_execution_duration_seconds"
	MetricSLI       = "scheduler_pod_scheduling_sli_duration_seconds"
	MetricAttempts  = "scheduler_schedule_attempts_total"
)

// Scraper reads the scheduler's /metrics endpoint with a client certificate. The scheduler's serving
// certificate is self-signed, so verification is skipped: the target is always loopback.
type Scraper struct {
	URL    string
	client *http.Client
}

// NewScraper returns a scraper for url authenticating with the given certificate and key files.
func NewScraper(url, certFile, keyFile string) (*Scraper, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s: %w", certFile, err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}} //nolint:gosec // loopback scrape of a self-signed scheduler
	return &Scraper{URL: url, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// Scrape returns the metric families the scheduler exposes now.
func (s *Scraper) Scrape(ctx context.Context) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.URL, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("scrape %s: %s: %s", s.URL, resp.Status, b)
	}
	return ParseFamilies(resp.Body)
}

// Families are parsed metric families by name.
type Families map[string]*dto.MetricFamily

// ParseFamilies parses the Prometheus text format.
func ParseFamilies(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return fams, nil
}

// Histogram is a cumulative histogram: Counts[i] observations were <= Bounds[i]; Count is the total
// (the +Inf bucket).
type Histogram struct {
	Bounds []float64
	Counts []float64
	Count  float64
	Sum    float64
}

// Histogram sums the series of family name whose labels include every pair in match. A missing
// family gives an empty histogram.
func (f Families) Histogram(name string, match map[string]string) Histogram {
	var h Histogram
	fam := f[name]
	if fam == nil {
		return h
	}
	for _, m := range fam.GetMetric() {
		if !labelsMatch(m, match) || m.GetHistogram() == nil {
			continue
		}
		mh := m.GetHistogram()
		if h.Bounds == nil {
			for _, b := range mh.GetBucket() {
				h.Bounds = append(h.Bounds, b.GetUpperBound())
			}
			h.Counts = make([]float64, len(h.Bounds))
		}
		for i, b := range mh.GetBucket() {
			if i < len(h.Counts) {
				h.Counts[i] += float64(b.GetCumulativeCount())
			}
		}
		h.Count += float64(mh.GetSampleCount())
		h.Sum += mh.GetSampleSum()
	}
	return h
}

// Counter sums the counter series of family name whose labels include match.
func (f Families) Counter(name string, match map[string]string) float64 {
	var v float64
	if fam := f[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			if labelsMatch(m, match) && m.GetCounter() != nil {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := match[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(match)
}

// Sub returns h minus an earlier snapshot of the same series (what was observed in between).
func (h Histogram) Sub(before Histogram) Histogram {
	out := Histogram{Bounds: h.Bounds, Counts: append([]float64(nil), h.Counts...), Count: h.Count - before.Count, Sum: h.Sum - before.Sum}
	for i := range out.Counts {
		if i < len(before.Counts) {
			out.Counts[i] -= before.Counts[i]
		}
	}
	return out
}

// Quantile estimates the q-quantile (0..1) like Prometheus' histogram_quantile: linear
// interpolation inside the bucket that holds the rank; the lowest bucket starts at 0; a rank in the
// +Inf bucket returns the highest finite bound. NaN when the histogram is empty.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.Count
	i := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if i == len(h.Counts) || math.IsInf(h.Bounds[i], 1) {
		// Beyond the highest finite bound: report that bound, as histogram_quantile does.
		for j := min(i, len(h.Bounds)) - 1; j >= 0; j-- {
			if !math.IsInf(h.Bounds[j], 1) {
				return h.Bounds[j]
			}
		}
		return math.NaN()
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.Bounds[i-1], h.Counts[i-1]
	}
	inBucket := h.Counts[i] - below
	if inBucket <= 0 {
		return h.Bounds[i]
	}
	return lo + (h.Bounds[i]-lo)*(rank-below)/inBucket
}

// Mean returns the average observation, NaN when empty.
func (h Histogram) Mean() float64 {
	if h.Count <= 0 {
		return math.NaN()
	}
	return h.Sum / h.Count
}
