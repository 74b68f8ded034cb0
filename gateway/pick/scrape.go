package pick

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// The model-server metrics the queue and KV-cache scorers read, under vLLM's current names
// (vllm:gpu_cache_usage_perc is deprecated and not read).
const (
	MetricWaiting = "vllm:num_requests_waiting"
	MetricRunning = "vllm:num_requests_running"
	MetricKVUsage = "vllm:kv_cache_usage_perc"
	// The prefill rate is read from the engine's own counters: the prompt tokens of requests
	// that reached their first token, the prefix-cache hits (in tokens) and the seconds spent in
	// prefill (a histogram; its sum).
	MetricPromptTokens = "vllm:prompt_tokens_total"
	MetricPrefixHits   = "vllm:prefix_cache_hits_total"
	MetricPrefillTime  = "vllm:request_prefill_time_seconds"
	// MetricCacheConfig is vLLM's cache configuration info metric; its label
	// enable_prefix_caching says whether the engine keeps prompts' blocks for reuse at all.
	MetricCacheConfig = "vllm:cache_config_info"
)

// ServerMetrics is one scrape of a model server.
type ServerMetrics struct {
	// Waiting and Running are request counts; KVUsage is in [0,1]. NaN-free: a missing metric
	// leaves HasX false.
	Waiting, Running, KVUsage float64
	HasQueue, HasKV           bool
	// PromptTokens, PrefixHits (tokens) and PrefillSeconds are the engine's counters since it
	// started; HasPrefill says all three were read.
	PromptTokens, PrefixHits, PrefillSeconds float64
	HasPrefill                               bool
	// PrefixCaching is the engine's enable_prefix_caching (MetricCacheConfig); HasCacheConfig
	// says it was read.
	PrefixCaching, HasCacheConfig bool
	// At is when the scrape finished.
	At time.Time
}

// Scraper keeps the latest metrics of every endpoint of a routing table, scraping each one every
// Interval. A sample older than StaleAfter is not used (the scorers then treat the pod as
// unknown rather than idle).
type Scraper struct {
	// Table lists the endpoints.
	Table *route.Table
	// Client does the scrapes (default: 1 s timeout).
	Client *http.Client
	// Interval between scrapes (default 1 s).
	Interval time.Duration
	// StaleAfter (default 3 × Interval).
	StaleAfter time.Duration
	// Parallel bounds concurrent scrapes (default 16).
	Parallel int
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu sync.RWMutex
	m  map[string]ServerMetrics // by metrics URL
	// noCache lists the endpoints whose engine said it does not cache prefixes; a pod's
	// configuration does not change while it runs, so this outlives stale samples.
	noCache map[string]bool
}

func (s *Scraper) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Scraper) interval() time.Duration {
	if s.Interval > 0 {
		return s.Interval
	}
	return time.Second
}

// Get returns the fresh metrics of the endpoint at url.
func (s *Scraper) Get(url string) (ServerMetrics, bool) {
	m, fresh, _ := s.Lookup(url)
	return m, fresh
}

// Lookup returns, under one read of the table, the fresh metrics of the endpoint at url (false
// when none are fresh) and whether it ever said it does not cache prefixes (NoPrefixCaching).
func (s *Scraper) Lookup(url string) (m ServerMetrics, fresh, noCache bool) {
	if s == nil || url == "" {
		return ServerMetrics{}, false, false
	}
	s.mu.RLock()
	m, ok := s.m[url]
	noCache = s.noCache[url]
	s.mu.RUnlock()
	stale := s.StaleAfter
	if stale <= 0 {
		stale = 3 * s.interval()
	}
	if !ok || s.now().Sub(m.At) > stale {
		return ServerMetrics{}, false, noCache
	}
	return m, true, noCache
}

// Set stores a sample (for tests and for callers that scrape themselves).
func (s *Scraper) Set(url string, m ServerMetrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m, s.noCache = map[string]ServerMetrics{}, map[string]bool{}
	}
	s.m[url] = m
	if m.HasCacheConfig {
		s.noCache[url] = !m.PrefixCaching
	}
}

// NoPrefixCaching reports whether the endpoint at url said, in any scrape since it joined the
// table, that its engine does not cache prefixes (vllm:cache_config_info
// enable_prefix_caching="False"): what the approximate index remembers sending it is then not
// in its cache.
func (s *Scraper) NoPrefixCaching(url string) bool {
	_, _, noCache := s.Lookup(url)
	return noCache
}

// Run scrapes until ctx ends.
func (s *Scraper) Run(ctx context.Context) {
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		s.scrapeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Scraper) scrapeAll(ctx context.Context) {
	urls := map[string]bool{}
	for _, p := range s.Table.Load().Pools() {
		for _, e := range p.Endpoints {
			if e.MetricsURL != "" {
				urls[e.MetricsURL] = true
			}
		}
	}
	par := s.Parallel
	if par <= 0 {
		par = 16
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for u := range urls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m, err := s.scrape(ctx, u)
			if err != nil {
				klog.FromContext(ctx).V(3).Info("Model server scrape failed", "url", u, "err", err)
				return
			}
			s.Set(u, m)
		})
	}
	wg.Wait()
	// Forget endpoints that left the table.
	s.mu.Lock()
	for u := range s.m {
		if !urls[u] {
			delete(s.m, u)
			delete(s.noCache, u)
		}
	}
	s.mu.Unlock()
}

// scrapeClient is the default scrape client. It asks for an uncompressed answer: the few
// metrics asked for are cheaper to send than to gzip at the pod and gunzip here (a gzip reader
// per scrape was about 150,000 of the gateway's 1.17 million instructions per scrape of a demo
// agent; parsing the text is most of the rest).
var scrapeClient = &http.Client{Timeout: time.Second, Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	return t
}()}

// scrapeQuery asks the server for the three metrics only: Prometheus' client libraries (Go's
// promhttp, Python's prometheus_client under vLLM) honour name[] and skip encoding the rest;
// servers that do not answer with everything, which the parser skips. The Accept header asks for
// the text format the parser reads.
var scrapeQuery = "name[]=" + MetricWaiting + "&name[]=" + MetricRunning + "&name[]=" + MetricKVUsage +
	"&name[]=" + MetricPromptTokens + "&name[]=" + MetricPrefixHits + "&name[]=" + MetricPrefillTime +
	"&name[]=" + MetricPrefillTime + "_sum" + "&name[]=" + MetricCacheConfig

// PrefillRate is the engine's mean prefill rate, in tokens per second: the prompt tokens it
// computed (prompt tokens less prefix-cache hits) over its seconds in prefill, or 0 when the
// counters are missing or too small to tell (fewer than prefillFloor computed tokens). The
// seconds are the engine's own, so the rate is free of what the network, the gateway and the
// engine's request intake (tokenizing) add to a request's time to first token. An engine that
// prefills several requests at once counts each one's time, so its rate errs slow.
func (m ServerMetrics) PrefillRate() float64 {
	computed := m.PromptTokens - m.PrefixHits
	if !m.HasPrefill || !(m.PrefillSeconds > 0) || computed < prefillFloor {
		return 0
	}
	return computed / m.PrefillSeconds
}

func (s *Scraper) scrape(ctx context.Context, url string) (ServerMetrics, error) {
	c := s.Client
	if c == nil {
		c = scrapeClient
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+sep+scrapeQuery, nil)
	if err != nil {
		return ServerMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := c.Do(req)
	if err != nil {
		return ServerMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ServerMetrics{}, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	m, err := ParseServerMetrics(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return ServerMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	m.At = s.now()
	return m, nil
}

// ParseServerMetrics reads the three scorer metrics from a Prometheus text exposition (parsed by
// expfmt, as controller/rollout does), summing each over its label sets (a server exports one
// series per model). A NaN or infinite sample is not used; an exposition that does not parse is an
// error, so its pod's metrics are not trusted.
func ParseServerMetrics(r io.Reader) (ServerMetrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return ServerMetrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	var m ServerMetrics
	w, nw := sumOf(fams[MetricWaiting])
	run, nr := sumOf(fams[MetricRunning])
	m.Waiting, m.Running, m.HasQueue = w, run, nw+nr > 0
	if kv, n := sumOf(fams[MetricKVUsage]); n > 0 {
		m.KVUsage, m.HasKV = kv/float64(n), true
	}
	prompt, np := sumOf(fams[MetricPromptTokens])
	hits, nh := sumOf(fams[MetricPrefixHits])
	secs, ns := histogramSum(fams[MetricPrefillTime])
	if ns == 0 { // a histogram exposed without its TYPE line parses as untyped samples
		secs, ns = sumOf(fams[MetricPrefillTime+"_sum"])
	}
	if np > 0 && nh > 0 && ns > 0 {
		m.PromptTokens, m.PrefixHits, m.PrefillSeconds, m.HasPrefill = prompt, hits, secs, true
	}
	m.PrefixCaching, m.HasCacheConfig = prefixCaching(fams[MetricCacheConfig])
	return m, nil
}

// prefixCaching reads the enable_prefix_caching label of the cache configuration info metric
// (vLLM writes Python's "True"/"False"): on when any series says so; known when one has the
// label with a boolean value.
func prefixCaching(f *dto.MetricFamily) (on, known bool) {
	for _, mt := range f.GetMetric() {
		for _, l := range mt.GetLabel() {
			if l.GetName() != "enable_prefix_caching" {
				continue
			}
			if v, err := strconv.ParseBool(l.GetValue()); err == nil {
				on, known = on || v, true
			}
		}
	}
	return on, known
}

// histogramSum sums the finite sample sums of histogram family f and counts them.
func histogramSum(f *dto.MetricFamily) (sum float64, n int) {
	for _, mt := range f.GetMetric() {
		if h := mt.GetHistogram(); h != nil && !math.IsNaN(h.GetSampleSum()) && !math.IsInf(h.GetSampleSum(), 0) {
			sum += h.GetSampleSum()
			n++
		}
	}
	return sum, n
}

// sumOf sums the finite gauge, counter or untyped samples of f and counts them.
func sumOf(f *dto.MetricFamily) (sum float64, n int) {
	for _, mt := range f.GetMetric() {
		var v float64
		switch {
		case mt.Gauge != nil:
			v = mt.GetGauge().GetValue()
		case mt.Counter != nil:
			v = mt.GetCounter().GetValue()
		case mt.Untyped != nil:
			v = mt.GetUntyped().GetValue()
		default:
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		sum += v
		n++
	}
	return sum, n
}
