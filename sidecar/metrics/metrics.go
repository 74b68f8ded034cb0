// Package metrics defines the sidecar's Prometheus metrics. Names follow the
// seed where it names them (neuronetes_retrieval_*); the rest are
// neuronetes_sidecar_*.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the sidecar's collectors. Create with New; register once.
type Metrics struct {
	// Requests counts API requests by api (http, grpc), op and code.
	Requests *prometheus.CounterVec
	// RequestLatency observes API request latency by op.
	RequestLatency *prometheus.HistogramVec
	// RedisLatency observes Redis round trips by op.
	RedisLatency *prometheus.HistogramVec
	// RedisErrors counts failed Redis calls by op.
	RedisErrors *prometheus.CounterVec
	// NearCache counts near-cache lookups by result (hit, miss).
	NearCache *prometheus.CounterVec
	// EmbeddingCache counts embedding-cache lookups by result (hit, miss).
	EmbeddingCache *prometheus.CounterVec
	// RetrievalMisses counts vector searches that returned fewer than k results
	// and embedding lookups that missed (seed name).
	RetrievalMisses *prometheus.CounterVec
	// RetrievalLatency observes vector search latency (seed name).
	RetrievalLatency *prometheus.HistogramVec
	// VectorEntries is the number of vectors in the node-local shard.
	VectorEntries prometheus.Gauge
	// KeysLoaded is 1 when a key ring is loaded, 0 while sessions are unavailable for lack of keys.
	KeysLoaded prometheus.Gauge

	agentClass string
}

var fastBuckets = prometheus.ExponentialBuckets(5e-6, 2, 18) // 5µs .. ~0.65s

// New builds the collectors; agentClass labels the retrieval metrics.
func New(agentClass string) *Metrics {
	return &Metrics{
		agentClass: agentClass,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_sidecar_requests_total",
			Help: "Sidecar API requests by api, operation and status code."}, []string{"api", "op", "code"}),
		RequestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_sidecar_request_duration_seconds",
			Help: "Sidecar API request latency.", Buckets: fastBuckets}, []string{"op"}),
		RedisLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_sidecar_redis_duration_seconds",
			Help: "Redis round-trip latency by operation.", Buckets: fastBuckets}, []string{"op"}),
		RedisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_sidecar_redis_errors_total",
			Help: "Failed Redis calls by operation."}, []string{"op"}),
		NearCache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_sidecar_near_cache_requests_total",
			Help: "Near-cache lookups by result."}, []string{"result"}),
		EmbeddingCache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_sidecar_embedding_cache_requests_total",
			Help: "Embedding-cache lookups by result."}, []string{"result"}),
		RetrievalMisses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_retrieval_misses_total",
			Help: "Retrievals that missed: embedding-cache misses and searches short of k results."}, []string{"agent_class"}),
		RetrievalLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "neuronetes_retrieval_latency_seconds",
			Help: "Vector search latency.", Buckets: fastBuckets}, []string{"agent_class"}),
		VectorEntries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_sidecar_vector_entries",
			Help: "Vectors held by the node-local shard."}),
		KeysLoaded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "neuronetes_sidecar_keys_loaded",
			Help: "1 when an encryption key ring is loaded; 0 means session calls answer 503."}),
	}
}

// Register registers every collector with r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Requests, m.RequestLatency, m.RedisLatency, m.RedisErrors,
		m.NearCache, m.EmbeddingCache, m.RetrievalMisses, m.RetrievalLatency, m.VectorEntries, m.KeysLoaded} {
		if err := r.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// RedisCall implements store.Observer.
func (m *Metrics) RedisCall(op string, d time.Duration, err error) {
	m.RedisLatency.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		m.RedisErrors.WithLabelValues(op).Inc()
	}
}

// NearCacheLookup records one near-cache lookup.
func (m *Metrics) NearCacheLookup(hit bool) {
	if hit {
		m.NearCache.WithLabelValues("hit").Inc()
	} else {
		m.NearCache.WithLabelValues("miss").Inc()
	}
}

// Retrieval records one vector search that wanted k and found n results.
func (m *Metrics) Retrieval(d time.Duration, k, n int) {
	m.RetrievalLatency.WithLabelValues(m.agentClass).Observe(d.Seconds())
	if n < k {
		m.RetrievalMisses.WithLabelValues(m.agentClass).Inc()
	}
}

// Embedding records one embedding-cache lookup.
func (m *Metrics) Embedding(hit bool) {
	if hit {
		m.EmbeddingCache.WithLabelValues("hit").Inc()
		return
	}
	m.EmbeddingCache.WithLabelValues("miss").Inc()
	m.RetrievalMisses.WithLabelValues(m.agentClass).Inc()
}

// SetKeysLoaded records whether a key ring is loaded.
func (m *Metrics) SetKeysLoaded(ok bool) {
	if ok {
		m.KeysLoaded.Set(1)
		return
	}
	m.KeysLoaded.Set(0)
}
