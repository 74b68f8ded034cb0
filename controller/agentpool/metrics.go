package agentpool

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the seed 001 pool metrics, labelled by pool and namespace.
type Metrics struct {
	Replicas        *prometheus.GaugeVec
	DesiredReplicas *prometheus.GaugeVec
	WarmReplicas    *prometheus.GaugeVec
	Activations     *prometheus.CounterVec
	ScaleOperations *prometheus.CounterVec
	ScaleUp         *prometheus.CounterVec
	ScaleDown       *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	labels := []string{"pool", "namespace"}
	m := &Metrics{
		Replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "neuronetes_agentpool_replicas", Help: "Serving pods of the pool.",
		}, labels),
		DesiredReplicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "neuronetes_agentpool_desired_replicas", Help: "Desired serving pods (spec.replicas clamped to bounds).",
		}, labels),
		WarmReplicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "neuronetes_warm_pool_replicas", Help: "Ready warm pods of the pool.",
		}, labels),
		Activations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuronetes_warm_pool_activations_total", Help: "Warm pods turned into serving pods.",
		}, labels),
		ScaleOperations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuronetes_agentpool_scale_operations_total", Help: "Scale operations applied to the pool.",
		}, labels),
		ScaleUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuronetes_scale_up_total", Help: "Scale-up operations applied to the pool.",
		}, labels),
		ScaleDown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuronetes_scale_down_total", Help: "Scale-down operations applied to the pool.",
		}, labels),
	}
	if reg != nil {
		reg.MustRegister(m.Replicas, m.DesiredReplicas, m.WarmReplicas, m.Activations, m.ScaleOperations, m.ScaleUp, m.ScaleDown)
	}
	return m
}

// forget drops a deleted pool's series.
func (m *Metrics) forget(pool, ns string) {
	for _, v := range []*prometheus.MetricVec{m.Replicas.MetricVec, m.DesiredReplicas.MetricVec, m.WarmReplicas.MetricVec,
		m.Activations.MetricVec, m.ScaleOperations.MetricVec, m.ScaleUp.MetricVec, m.ScaleDown.MetricVec} {
		v.DeleteLabelValues(pool, ns)
	}
}
