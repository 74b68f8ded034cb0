package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node agent's Prometheus metrics. It implements cache.Observer.
type Metrics struct {
	// CacheHits counts requests served from an existing entry.
	CacheHits prometheus.Counter
	// BytesFetched counts bytes downloaded from sources.
	BytesFetched prometheus.Counter
	// FetchDuration observes the time to fetch and verify an entry.
	FetchDuration prometheus.Histogram
	// PrewarmDuration observes the time to bring an entry into the page cache.
	PrewarmDuration prometheus.Histogram
	// ResidentBytes is the page-cache-resident size of all entries (mincore).
	ResidentBytes prometheus.Gauge
	// CachedBytes is the on-disk size of all entries.
	CachedBytes prometheus.Gauge
	// Entries is the number of entries.
	Entries prometheus.Gauge
	// Evictions counts entries removed from disk.
	Evictions prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.05, 2, 14)
	m := &Metrics{
		CacheHits:       prometheus.NewCounter(prometheus.CounterOpts{Name: "neuronetes_nodeagent_cache_hits_total", Help: "Model weight requests served from an existing cache entry."}),
		BytesFetched:    prometheus.NewCounter(prometheus.CounterOpts{Name: "neuronetes_nodeagent_bytes_fetched_total", Help: "Bytes of model weights downloaded from sources."}),
		FetchDuration:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "neuronetes_nodeagent_fetch_duration_seconds", Help: "Time to fetch and verify one cache entry.", Buckets: buckets}),
		PrewarmDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "neuronetes_nodeagent_prewarm_duration_seconds", Help: "Time to bring one cache entry into the page cache.", Buckets: buckets}),
		ResidentBytes:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_nodeagent_resident_bytes", Help: "Page-cache-resident bytes of all cache entries (mincore)."}),
		CachedBytes:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_nodeagent_cached_bytes", Help: "On-disk bytes of all cache entries."}),
		Entries:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_nodeagent_cache_entries", Help: "Number of cache entries."}),
		Evictions:       prometheus.NewCounter(prometheus.CounterOpts{Name: "neuronetes_nodeagent_evictions_total", Help: "Cache entries removed from disk to honour the disk budget."}),
	}
	if reg != nil {
		reg.MustRegister(m.CacheHits, m.BytesFetched, m.FetchDuration, m.PrewarmDuration, m.ResidentBytes, m.CachedBytes, m.Entries, m.Evictions)
	}
	return m
}

// Hit implements cache.Observer.
func (m *Metrics) Hit(string) { m.CacheHits.Inc() }

// Fetched implements cache.Observer.
func (m *Metrics) Fetched(_ string, n int64) { m.BytesFetched.Add(float64(n)) }

// Completed implements cache.Observer.
func (m *Metrics) Completed(_ string, _ int64, d time.Duration) { m.FetchDuration.Observe(d.Seconds()) }

// Evicted implements cache.Observer.
func (m *Metrics) Evicted(string, int64) { m.Evictions.Inc() }
