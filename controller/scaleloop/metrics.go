package scaleloop

import (
	"github.com/prometheus/client_golang/prometheus"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// Metrics records every autoscaling decision, labelled by pool and namespace.
// All methods are nil-safe.
type Metrics struct {
	decisions *prometheus.CounterVec
	desired   *prometheus.GaugeVec
	raw       *prometheus.GaugeVec
	values    *prometheus.GaugeVec
	ratio     *prometheus.GaugeVec
}

// NewMetrics creates the autoscaler metrics and registers them with reg (when not nil):
// neuronetes_autoscaler_decisions_total{pool,namespace,reason,direction},
// neuronetes_autoscaler_desired_replicas, neuronetes_autoscaler_recommended_replicas,
// neuronetes_autoscaler_metric_value{metric} and neuronetes_autoscaler_metric_ratio{metric}.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	l := []string{"pool", "namespace"}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_autoscaler_decisions_total",
			Help: "Autoscaling decisions by reason and direction (up, down, none)."}, append(l, "reason", "direction")),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_autoscaler_desired_replicas",
			Help: "Serving replicas decided by the autoscaler."}, l),
		raw: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_autoscaler_recommended_replicas",
			Help: "Unconstrained recommendation before stabilization and limits."}, l),
		values: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_autoscaler_metric_value",
			Help: "Metric value seen by the autoscaler (per replica where the metric is)."}, append(l, "metric")),
		ratio: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "neuronetes_autoscaler_metric_ratio",
			Help: "current/target ratio of each metric."}, append(l, "metric")),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.desired, m.raw, m.values, m.ratio)
	}
	return m
}

func (m *Metrics) observe(pool *v1alpha1.AgentPool, d scalepolicy.Decision) {
	if m == nil {
		return
	}
	dir := "none"
	switch {
	case d.Desired > d.Current:
		dir = "up"
	case d.Desired < d.Current:
		dir = "down"
	}
	m.decisions.WithLabelValues(pool.Name, pool.Namespace, string(d.Reason), dir).Inc()
	m.desired.WithLabelValues(pool.Name, pool.Namespace).Set(float64(d.Desired))
	m.raw.WithLabelValues(pool.Name, pool.Namespace).Set(float64(d.Raw))
	for t, r := range d.Ratios {
		m.ratio.WithLabelValues(pool.Name, pool.Namespace, string(t)).Set(r)
	}
}

func (m *Metrics) metricValue(pool *v1alpha1.AgentPool, t scalepolicy.MetricType, v float64) {
	if m == nil {
		return
	}
	m.values.WithLabelValues(pool.Name, pool.Namespace, string(t)).Set(v)
}

func (m *Metrics) forget(pool, ns string) {
	if m == nil {
		return
	}
	lbl := prometheus.Labels{"pool": pool, "namespace": ns}
	m.decisions.DeletePartialMatch(lbl)
	m.desired.DeletePartialMatch(lbl)
	m.raw.DeletePartialMatch(lbl)
	m.values.DeletePartialMatch(lbl)
	m.ratio.DeletePartialMatch(lbl)
}
