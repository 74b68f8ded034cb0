// Package metrics holds the dispatcher's Prometheus metrics: the seed's
// neuronetes_tool_latency_seconds{tool_name, agent_class} for queue messages (tool_name is the
// ToolBinding) and proxied tool calls, and the dispatch counters and gauges.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neuronetes/neuronetes/dispatcher/gwclient"
)

// Metrics are registered once per process.
type Metrics struct {
	// ToolLatency is neuronetes_tool_latency_seconds: one gateway call of a queued message, or
	// one proxied tool call, from the dispatcher's request to the whole answer.
	ToolLatency *prometheus.HistogramVec
	// Messages counts neuronetes_dispatch_messages_total{binding, provider, event}.
	Messages *prometheus.CounterVec
	// Attempts counts neuronetes_dispatch_attempts_total{binding, outcome}.
	Attempts *prometheus.CounterVec
	// InFlight is neuronetes_dispatch_in_flight{binding} (this replica).
	InFlight *prometheus.GaugeVec
	// Lag is neuronetes_dispatch_lag{binding}: messages not yet acknowledged by the group.
	Lag *prometheus.GaugeVec
	// ToolCalls counts neuronetes_tool_calls_total{tool_name, pool, outcome}.
	ToolCalls *prometheus.CounterVec
}

// New registers the metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ToolLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_tool_latency_seconds",
			Help:    "Latency of a tool invocation: a queued message's call through the gateway, or a proxied tool call.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"tool_name", "agent_class"}),
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_dispatch_messages_total",
			Help: "Queued messages by event: received, succeeded, retried, dead_lettered, duplicate."}, []string{"binding", "provider", "event"}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_dispatch_attempts_total",
			Help: "Gateway calls of queued messages by outcome (ok, or the error class)."}, []string{"binding", "outcome"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_dispatch_in_flight",
			Help: "Messages this replica is working on."}, []string{"binding"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_dispatch_lag",
			Help: "Messages of the binding's queue not yet acknowledged by its consumer group (-1 unknown)."}, []string{"binding"}),
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_tool_calls_total",
			Help: "Tool proxy calls by outcome: ok, refused_schema, refused_auth, refused_idempotency, replayed, error, timeout."}, []string{"tool_name", "pool", "outcome"}),
	}
	reg.MustRegister(m.ToolLatency, m.Messages, m.Attempts, m.InFlight, m.Lag, m.ToolCalls)
	return m
}

// Binding is the worker.Observer of one queue binding.
type Binding struct {
	m                           *Metrics
	binding, provider, toolName string
	agentClass                  string
}

// ForBinding returns the observer of binding (namespace/name) served by provider for a pool of
// agentClass; tool_name is the binding's name.
func (m *Metrics) ForBinding(binding, name, provider, agentClass string) *Binding {
	return &Binding{m: m, binding: binding, provider: provider, toolName: name, agentClass: agentClass}
}

// Event implements worker.Observer.
func (b *Binding) Event(name string) {
	b.m.Messages.WithLabelValues(b.binding, b.provider, name).Inc()
}

// Attempt implements worker.Observer.
func (b *Binding) Attempt(d time.Duration, err error) {
	b.m.ToolLatency.WithLabelValues(b.toolName, b.agentClass).Observe(d.Seconds())
	b.m.Attempts.WithLabelValues(b.binding, ErrorClass(err)).Inc()
}

// ErrorClass is a small label value for an attempt's outcome.
func ErrorClass(err error) string {
	var se *gwclient.StatusError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &se) && se.Status == 429:
		return "rate_limited"
	case errors.As(err, &se) && se.Status >= 500:
		return "gateway_5xx"
	case errors.As(err, &se):
		return "gateway_4xx"
	default:
		return "transport"
	}
}
