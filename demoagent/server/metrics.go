package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/demoagent/engine"
)

// Bucket layouts of vLLM's histograms of the same names.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
		480.0, 960.0, 1920.0, 7680.0}
	// neuronetesBuckets are the seed's TTFT buckets, which the autoscaler's ttft-p95 reads.
	neuronetesBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10}
)

// oneTwoFive returns 1, 2, 5, 10, 20, 50 ... up to limit: vLLM's token-count buckets.
func oneTwoFive(limit int) []float64 {
	var out []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*scale > limit {
				return out
			}
			out = append(out, float64(m*scale))
		}
	}
}

// metrics holds vLLM's current metric names (labels model_name and engine) plus the seed's
// neuronetes_* names.
type metrics struct {
	reg *prometheus.Registry

	promptTokens, genTokens   prometheus.Counter
	success                   *prometheus.CounterVec
	ttft, itl, e2e            prometheus.Histogram
	queue, prefill, decode    prometheus.Histogram
	inference                 prometheus.Histogram
	reqPrompt, reqGen, reqMax prometheus.Histogram

	nnTTFT        *prometheus.HistogramVec
	nnTokens      *prometheus.CounterVec
	sessionsGauge prometheus.Gauge
	weightsLoadS  prometheus.Gauge
	toolLatency   *prometheus.HistogramVec
	sessionErrors prometheus.Counter
	injected      *prometheus.CounterVec

	rate *tokenRate
}

func newMetrics(model, class string, eng *engine.Engine, clk clock.PassiveClock) *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	vl := prometheus.Labels{"model_name": model, "engine": "0"}
	nl := prometheus.Labels{"model": model, "agent_class": class}
	hist := func(name, help string, b []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: vl, Buckets: b})
	}
	tokenBuckets := oneTwoFive(eng.MaxTokens())
	m := &metrics{
		reg:          reg,
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: vl}),
		genTokens:    prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: vl}),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of finished requests by finish reason.",
			ConstLabels: vl}, []string{"finished_reason"}),
		ttft:      hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:       hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:       hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets),
		queue:     hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets),
		prefill:   hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestBuckets),
		decode:    hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestBuckets),
		inference: hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestBuckets),
		reqPrompt: hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokenBuckets),
		reqGen:    hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokenBuckets),
		reqMax:    hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokenBuckets),
		nnTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_ttft_seconds", Help: "Time to first token.",
			ConstLabels: nl, Buckets: neuronetesBuckets}, []string{"route"}),
		nnTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_tokens_total", Help: "Tokens by direction.",
			ConstLabels: nl}, []string{"direction"}),
		sessionsGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_concurrent_sessions", Help: "Conversations active in the last 5 minutes.", ConstLabels: nl}),
		weightsLoadS:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_weights_load_seconds", Help: "Time spent reading the weights at start.", ConstLabels: nl}),
		toolLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_tool_latency_seconds", Help: "Tool (and sidecar) call latency.",
			ConstLabels: prometheus.Labels{"agent_class": class}, Buckets: neuronetesBuckets}, []string{"tool_name"}),
		sessionErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "neuronetes_demo_session_errors_total", Help: "Failed sidecar session calls."}),
		injected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_demo_injected_failures_total",
			Help: "Requests failed on purpose (--fail-rate), by mode."}, []string{"mode"}),
		rate: &tokenRate{clk: clk},
	}
	reg.MustRegister(m.promptTokens, m.genTokens, m.success, m.ttft, m.itl, m.e2e, m.queue, m.prefill, m.decode, m.inference,
		m.reqPrompt, m.reqGen, m.reqMax, m.nnTTFT, m.nnTokens, m.sessionsGauge, m.weightsLoadS, m.toolLatency,
		m.sessionErrors, m.injected, &engineCollector{eng: eng, vl: vl, nl: nl})
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "neuronetes_tokens_per_second", Help: "Generated tokens per second over the last 5 s.",
		ConstLabels: prometheus.Labels{"model": model, "agent_class": class, "direction": "output"},
	}, m.rate.perSecond))
	return m
}

// engineCollector exports the engine's queue and cache state, read once per scrape.
type engineCollector struct {
	eng    *engine.Engine
	vl, nl prometheus.Labels
}

func (c *engineCollector) descs() (running, waiting, usage, queries, hits, info, queued *prometheus.Desc) {
	cfg := c.eng.Config()
	infoLabels := prometheus.Labels{"engine": "0", "block_size": strconv.Itoa(cfg.BlockSize),
		"num_gpu_blocks": strconv.Itoa(cfg.Blocks), "enable_prefix_caching": strconv.FormatBool(cfg.PrefixCaching)}
	return prometheus.NewDesc("vllm:num_requests_running", "Number of requests in model execution batches.", nil, c.vl),
		prometheus.NewDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", nil, c.vl),
		prometheus.NewDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", nil, c.vl),
		prometheus.NewDesc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", nil, c.vl),
		prometheus.NewDesc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", nil, c.vl),
		prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", nil, infoLabels),
		prometheus.NewDesc("neuronetes_tokens_in_queue", "Prompt tokens of requests waiting to be processed.", nil, c.nl)
}

// Describe implements prometheus.Collector.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	a, b, d, e, f, g, h := c.descs()
	for _, x := range []*prometheus.Desc{a, b, d, e, f, g, h} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.eng.Stats()
	running, waiting, usage, queries, hits, info, queued := c.descs()
	ch <- prometheus.MustNewConstMetric(running, prometheus.GaugeValue, float64(st.Running))
	ch <- prometheus.MustNewConstMetric(waiting, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(usage, prometheus.GaugeValue, st.Cache.Usage)
	ch <- prometheus.MustNewConstMetric(queries, prometheus.CounterValue, float64(st.Cache.Queries))
	ch <- prometheus.MustNewConstMetric(hits, prometheus.CounterValue, float64(st.Cache.Hits))
	ch <- prometheus.MustNewConstMetric(info, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(queued, prometheus.GaugeValue, float64(st.WaitingTokens))
}

// rateWindow is the number of whole seconds neuronetes_tokens_per_second averages over.
const rateWindow = 5

// tokenRate counts generated tokens per unix second in a ring of rateWindow seconds.
type tokenRate struct {
	clk     clock.PassiveClock
	mu      sync.Mutex
	buckets [rateWindow]struct {
		sec    int64
		tokens int
	}
}

func (r *tokenRate) add(n int) {
	now := r.clk.Now().Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := &r.buckets[now%rateWindow]
	if b.sec != now {
		b.sec, b.tokens = now, 0
	}
	b.tokens += n
}

// perSecond is the rate over the last rateWindow whole seconds (the current one is partial).
func (r *tokenRate) perSecond() float64 {
	now := r.clk.Now().Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	for _, b := range r.buckets {
		if b.sec < now && b.sec >= now-rateWindow {
			total += b.tokens
		}
	}
	return float64(total) / rateWindow
}

// sessions tracks conversations active in the last 5 minutes (seed 001's concurrent sessions).
type sessions struct {
	clk  clock.PassiveClock
	mu   sync.Mutex
	last map[string]time.Time
}

// touch records activity of conv (if any), forgets idle ones, and returns the active count.
func (s *sessions) touch(conv string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if conv != "" {
		s.last[conv] = now
	}
	for k, t := range s.last {
		if now.Sub(t) > 5*time.Minute {
			delete(s.last, k)
		}
	}
	return len(s.last)
}
