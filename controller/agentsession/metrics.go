package agentsession

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Metrics are the session counts by phase and the suspend and resume latencies.
type Metrics struct {
	Sessions       *prometheus.GaugeVec
	SuspendSeconds prometheus.Histogram
	ResumeSeconds  prometheus.Histogram

	mu     sync.Mutex
	phases map[types.NamespacedName]nnv1.AgentSessionPhase
}

// NewMetrics creates the metrics and registers them with reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}
	m := &Metrics{
		Sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "neuronetes_agent_sessions", Help: "AgentSessions by phase.",
		}, []string{"phase"}),
		SuspendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "neuronetes_agent_session_suspend_seconds", Help: "Time from Suspending to Suspended (checkpoint and pod deletion).", Buckets: buckets,
		}),
		ResumeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "neuronetes_agent_session_resume_seconds", Help: "Time from Resuming to Running (new pod and restore).", Buckets: buckets,
		}),
		phases: map[types.NamespacedName]nnv1.AgentSessionPhase{},
	}
	if reg != nil {
		reg.MustRegister(m.Sessions, m.SuspendSeconds, m.ResumeSeconds)
	}
	return m
}

// transition records a session's phase change (to "" when it is deleted) and, for the end of a
// suspension or a resume, its latency.
func (m *Metrics) transition(key types.NamespacedName, from, to nnv1.AgentSessionPhase, seconds float64) {
	if m == nil {
		return
	}
	switch {
	case from == nnv1.SessionSuspending && to == nnv1.SessionSuspended && seconds >= 0:
		m.SuspendSeconds.Observe(seconds)
	case from == nnv1.SessionResuming && to == nnv1.SessionRunning && seconds >= 0:
		m.ResumeSeconds.Observe(seconds)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if to == "" {
		delete(m.phases, key)
	} else {
		m.phases[key] = to
	}
	counts := map[nnv1.AgentSessionPhase]int{}
	for _, p := range m.phases {
		counts[p]++
	}
	for _, p := range []nnv1.AgentSessionPhase{nnv1.SessionPending, nnv1.SessionRunning, nnv1.SessionSuspending, nnv1.SessionSuspended, nnv1.SessionResuming} {
		m.Sessions.WithLabelValues(string(p)).Set(float64(counts[p]))
	}
}
