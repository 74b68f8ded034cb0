// Package metrics defines the gateway's Prometheus metrics: the seed's request metrics
// (neuronetes_ttft_seconds, neuronetes_tokens_per_second, neuronetes_tokens_total,
// neuronetes_cost_usd) and the gateway's own (affinity, in-flight, queue wait, rejects), plus the
// per-pool view the autoscaler scrapes (pool.go).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// TTFTBuckets are the TTFT histogram's bounds in seconds.
var TTFTBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 30, 60}

// Metrics are the gateway's collectors.
type Metrics struct {
	// Seed metrics.
	TTFT            *prometheus.HistogramVec // agent_class, model, route
	TokensPerSecond *prometheus.GaugeVec     // agent_class, model, direction
	Tokens          *prometheus.CounterVec   // agent_class, model, direction
	Cost            *prometheus.CounterVec   // agent_class, model

	// Gateway metrics.
	Requests     *prometheus.CounterVec   // pool, code, protocol
	Affinity     *prometheus.CounterVec   // pool, result
	InFlight     *prometheus.GaugeVec     // pool
	QueueWait    *prometheus.HistogramVec // pool, priority
	Queued       *prometheus.GaugeVec     // pool
	Rejected     *prometheus.CounterVec   // reason
	Retries      *prometheus.CounterVec   // pool, reason
	StreamErrors *prometheus.CounterVec   // pool, kind
	StoreErrors  *prometheus.CounterVec   // store, op
	Stages       *prometheus.CounterVec   // stage, action
	Shadows      *prometheus.CounterVec   // pool, result
	Fallbacks    *prometheus.CounterVec   // pool, fallback, reason
	Endpoints    *prometheus.GaugeVec     // pool
	KVIndex      *prometheus.GaugeVec     // pool, mode
	KVEvents     *prometheus.CounterVec   // result

	rate *rateWindow
}

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		TTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_ttft_seconds",
			Help: "Time from the gateway receiving a request to the first token it forwarded.", Buckets: TTFTBuckets},
			[]string{"agent_class", "model", "route"}),
		TokensPerSecond: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_tokens_per_second",
			Help: "Tokens per second through the gateway over the last 10 s (direction input: billed prompt tokens; output: completion tokens)."},
			[]string{"agent_class", "model", "direction"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_tokens_total",
			Help: "Tokens through the gateway (input: prompt tokens, output: completion tokens), from the backends' usage or counted chunks."},
			[]string{"agent_class", "model", "direction"}),
		Cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_cost_usd",
			Help: "US dollars of tokens served, from the RoutingPolicy's pricing."},
			[]string{"agent_class", "model"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_requests_total",
			Help: "Requests by pool, HTTP status and client protocol (http, sse, websocket, grpc)."},
			[]string{"pool", "code", "protocol"}),
		Affinity: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_affinity_total",
			Help: "Session affinity results: hit (pin held), miss (new session placed), repin (pinned pod gone, not ready or over its load bound), none (no session key)."},
			[]string{"pool", "result"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_gateway_inflight_requests",
			Help: "Requests this replica has in flight to a pool."}, []string{"pool"}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_gateway_queue_wait_seconds",
			Help: "Time admitted requests waited for pool capacity.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)},
			[]string{"pool", "priority"}),
		Queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_gateway_queued_requests",
			Help: "Requests waiting for pool capacity."}, []string{"pool"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_rejected_total",
			Help: "Requests refused, by reason."}, []string{"reason"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_retries_total",
			Help: "Requests retried on another pod before the first byte, by cause."}, []string{"pool", "reason"}),
		StreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_stream_errors_total",
			Help: "Backend exchanges that failed after the response started, by kind."}, []string{"pool", "kind"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_store_errors_total",
			Help: "Errors of the pin table and quota stores (Redis)."}, []string{"store", "op"}),
		Stages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_stage_decisions_total",
			Help: "Decisions of request stages other than allow."}, []string{"stage", "action"}),
		Shadows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_shadow_requests_total",
			Help: "Mirrored requests by result (ok, error, dropped)."}, []string{"pool", "result"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_cost_fallbacks_total",
			Help: "Requests a pool's cost fallback (AgentPool status.cost.fallback) served instead of the pool."}, []string{"pool", "fallback", "reason"}),
		Endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_gateway_endpoints",
			Help: "Routable endpoints per pool."}, []string{"pool"}),
		KVIndex: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_gateway_kv_index_endpoints",
			Help: "Routable endpoints per pool by how their prefix cache is known: exact (from the KV events they publish) or approximate (from routing history)."}, []string{"pool", "mode"}),
		KVEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_kv_events_total",
			Help: "KV-event messages received, by result: applied, gap (a pod's index cleared on a sequence gap), overflow (cleared past its bound), error (a failed connection or malformed message)."}, []string{"result"}),
		rate: newRateWindow(),
	}
	reg.MustRegister(m.TTFT, m.TokensPerSecond, m.Tokens, m.Cost, m.Requests, m.Affinity, m.InFlight, m.QueueWait,
		m.Queued, m.Rejected, m.Retries, m.StreamErrors, m.StoreErrors, m.Stages, m.Shadows, m.Fallbacks, m.Endpoints,
		m.KVIndex, m.KVEvents)
	return m
}

// AddTokens counts tokens of one direction ("input" or "output").
func (m *Metrics) AddTokens(class, model, direction string, n int) {
	if n <= 0 {
		return
	}
	m.Tokens.WithLabelValues(class, model, direction).Add(float64(n))
	m.rate.add(labels3{class, model, direction}, n)
}

// UpdateRates sets neuronetes_tokens_per_second from the last 10 s; call it every second.
func (m *Metrics) UpdateRates() {
	for l, v := range m.rate.rates() {
		m.TokensPerSecond.WithLabelValues(l.a, l.b, l.c).Set(v)
	}
}
