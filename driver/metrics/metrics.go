// Package metrics defines the driver's Prometheus metrics (neuronetes_driver_*), registered on a
// registry of their own so tests and several drivers in one process do not collide.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds every metric of the driver.
type Metrics struct {
	Registry *prometheus.Registry
	// PrepareSeconds observes NodePrepareResources per claim, labelled by result (ok, error).
	PrepareSeconds *prometheus.HistogramVec
	// UnprepareSeconds observes NodeUnprepareResources per claim.
	UnprepareSeconds *prometheus.HistogramVec
	// DevicesAdvertised is the number of published devices by type (gpu, mig).
	DevicesAdvertised *prometheus.GaugeVec
	// MIGInstances is the number of MIG instances owned by prepared claims.
	MIGInstances prometheus.Gauge
	// PreparedClaims is the number of prepared claims.
	PreparedClaims prometheus.Gauge
	// HealthEvents counts health events by kind, xid and whether they were fatal.
	HealthEvents *prometheus.CounterVec
	// TaintedGPUs is the number of GPUs with a health taint.
	TaintedGPUs prometheus.Gauge
}

// New creates and registers the metrics.
func New() *Metrics {
	buckets := prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5 ms .. 16 s
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		PrepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "neuronetes_driver_prepare_seconds", Help: "Latency of preparing one ResourceClaim.", Buckets: buckets,
		}, []string{"result"}),
		UnprepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "neuronetes_driver_unprepare_seconds", Help: "Latency of unpreparing one ResourceClaim.", Buckets: buckets,
		}, []string{"result"}),
		DevicesAdvertised: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "neuronetes_driver_devices_advertised", Help: "Devices published in ResourceSlices, by type.",
		}, []string{"type"}),
		MIGInstances: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuronetes_driver_mig_instances", Help: "MIG instances created by the driver for prepared claims.",
		}),
		PreparedClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuronetes_driver_prepared_claims", Help: "ResourceClaims currently prepared on this node.",
		}),
		HealthEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neuronetes_driver_health_events_total", Help: "GPU health events, by kind, XID and fatality.",
		}, []string{"kind", "xid", "fatal"}),
		TaintedGPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "neuronetes_driver_tainted_gpus", Help: "GPUs whose devices carry a health taint.",
		}),
	}
	m.Registry.MustRegister(m.PrepareSeconds, m.UnprepareSeconds, m.DevicesAdvertised, m.MIGInstances, m.PreparedClaims,
		m.HealthEvents, m.TaintedGPUs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
