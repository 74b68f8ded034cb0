package guard

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the guardrails' Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	// Blocks is the seed's neuronetes_safety_blocks_total{guardrail_type, action}: one count per
	// check that blocked, redacted or flagged a request or a response.
	Blocks *prometheus.CounterVec
	// Errors counts failed checks by type and the way they failed (open or closed).
	Errors *prometheus.CounterVec
	// Duration is the time each check took.
	Duration *prometheus.HistogramVec
}

// NewMetrics registers the metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuronetes_safety_blocks_total",
			Help: "Guardrail checks that blocked, redacted or flagged a request or response, by guardrail type and action.",
		}, []string{"guardrail_type", "action"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuronetes_guardrail_errors_total",
			Help: "Guardrail checks that failed or timed out, by guardrail type and failure policy (open or closed).",
		}, []string{"guardrail_type", "failure_policy"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "neuronetes_guardrail_check_duration_seconds",
			Help:    "Time one guardrail check took, by guardrail type.",
			Buckets: prometheus.ExponentialBuckets(0.00002, 2.5, 12),
		}, []string{"guardrail_type"}),
	}
	if reg != nil {
		reg.MustRegister(m.Blocks, m.Errors, m.Duration)
	}
	return m
}

func (m *Metrics) observe(o CheckOutcome) {
	if m == nil {
		return
	}
	m.Duration.WithLabelValues(o.Type).Observe(o.Duration.Seconds())
	if o.Err != nil {
		policy := "closed"
		if o.FailedOpen {
			policy = "open"
		}
		m.Errors.WithLabelValues(o.Type, policy).Inc()
	}
	if o.Action.rank() > 0 {
		m.Blocks.WithLabelValues(o.Type, string(o.Action)).Inc()
	}
}

// countStream records one response-side action of a stream filter.
func (m *Metrics) countStream(typ string, a Action) {
	if m == nil || a.rank() == 0 {
		return
	}
	m.Blocks.WithLabelValues(typ, string(a)).Inc()
}
