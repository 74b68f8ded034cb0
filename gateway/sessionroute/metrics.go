package sessionroute

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WaitBuckets are the resume-wait histogram's bounds in seconds.
var WaitBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120}

// Metrics are the session route's collectors; a nil *Metrics records nothing.
type Metrics struct {
	// Held is the number of requests held now for a session to serve.
	Held prometheus.Gauge
	// Wait is how long held requests waited, by result (served, timeout, gone, cancelled,
	// refused, pool_full).
	Wait *prometheus.HistogramVec
	// Activity counts activity writes by result (ok, error).
	Activity *prometheus.CounterVec
	// Created counts the sessions of pools' conversations this replica created, by result
	// (ok, error, full: refused at the pool's spec.maxReplicas).
	Created *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_gateway_session_held_requests",
			Help: "Requests held by this gateway replica until their AgentSession serves (it is starting, suspending, suspended or resuming)."}),
		Wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_gateway_session_resume_wait_seconds",
			Help:    "How long a request for an AgentSession that was not serving was held, by result: served (forwarded to the resumed pod), timeout, gone (the session was deleted), cancelled (the client left), refused (too many held; 0 s), pool_full (a Suspended session of a pool through sessions not woken: the pool's sessions holding a pod are at its spec.maxReplicas; 0 s).",
			Buckets: WaitBuckets}, []string{"result"}),
		Activity: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_session_activity_writes_total",
			Help: "Writes of an AgentSession's activity annotation by this replica, by result (ok, error)."}, []string{"result"}),
		Created: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_gateway_pool_sessions_created_total",
			Help: "AgentSessions this replica created for the conversations of AgentPools with spec.sessions, by result (ok, error, full: refused, the pool's sessions holding a pod being at its spec.maxReplicas)."}, []string{"result"}),
	}
	reg.MustRegister(m.Held, m.Wait, m.Activity, m.Created)
	return m
}

func (m *Metrics) holding(d float64) {
	if m != nil {
		m.Held.Add(d)
	}
}

func (m *Metrics) wait(result string, d time.Duration) {
	if m != nil {
		m.Wait.WithLabelValues(result).Observe(d.Seconds())
	}
}

func (m *Metrics) activity(result string) {
	if m != nil {
		m.Activity.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) created(result string) {
	if m != nil {
		m.Created.WithLabelValues(result).Inc()
	}
}
