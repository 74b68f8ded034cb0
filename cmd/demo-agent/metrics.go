package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// agentMetrics holds vLLM's own metric names plus the seed's neuronetes_* names.
type agentMetrics struct {
	reg          *prometheus.Registry
	model, class string

	waiting, running                 prometheus.Gauge
	vllmTTFT, e2eLatency             prometheus.Histogram
	genTokens, promptTokens          prometheus.Counter
	ttft                             *prometheus.HistogramVec
	tokens                           *prometheus.CounterVec
	tokensInQueue                    prometheus.Gauge
	concurrentSessions, weightsLoadS prometheus.Gauge
	toolLatency                      *prometheus.HistogramVec
	sessionErrors                    prometheus.Counter
}

func newAgentMetrics(model, class string) *agentMetrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	lbl := prometheus.Labels{"model_name": model}
	buckets := []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10}
	nl := prometheus.Labels{"model": model, "agent_class": class}
	m := &agentMetrics{
		reg:          reg,
		model:        model,
		class:        class,
		waiting:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting", Help: "Requests waiting for a slot.", ConstLabels: lbl}),
		running:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:num_requests_running", Help: "Requests generating.", ConstLabels: lbl}),
		vllmTTFT:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds", Help: "Time to first token.", ConstLabels: lbl, Buckets: buckets}),
		e2eLatency:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds", Help: "End-to-end request latency.", ConstLabels: lbl, Buckets: buckets}),
		genTokens:    prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:generation_tokens_total", Help: "Generated tokens.", ConstLabels: lbl}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total", Help: "Prompt tokens.", ConstLabels: lbl}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_ttft_seconds", Help: "Time to first token.",
			ConstLabels: nl, Buckets: buckets}, []string{"route"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_tokens_total", Help: "Tokens by direction.",
			ConstLabels: nl}, []string{"direction"}),
		tokensInQueue:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_tokens_in_queue", Help: "Prompt tokens of queued requests.", ConstLabels: nl}),
		concurrentSessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_concurrent_sessions", Help: "Conversations active in the last 5 minutes.", ConstLabels: nl}),
		weightsLoadS:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_weights_load_seconds", Help: "Time spent reading the weights at start.", ConstLabels: nl}),
		toolLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_tool_latency_seconds", Help: "Tool (and sidecar) call latency.",
			ConstLabels: prometheus.Labels{"agent_class": class}, Buckets: buckets}, []string{"tool_name"}),
		sessionErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "neuronetes_demo_session_errors_total", Help: "Failed sidecar session calls."}),
	}
	reg.MustRegister(m.waiting, m.running, m.vllmTTFT, m.e2eLatency, m.genTokens, m.promptTokens, m.ttft, m.tokens,
		m.tokensInQueue, m.concurrentSessions, m.weightsLoadS, m.toolLatency, m.sessionErrors)
	return m
}

// registerRate exports neuronetes_tokens_per_second, computed at scrape time so it decays to 0
// when the agent is idle.
func (m *agentMetrics) registerRate(model, class string, rate func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "neuronetes_tokens_per_second", Help: "Generated tokens per second over the last 5 s.",
		ConstLabels: prometheus.Labels{"model": model, "agent_class": class, "direction": "output"},
	}, rate))
}
