package metrics

import (
	"context"
	"net/http"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/neuronetes/neuronetes/gateway/poolview"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// Names of the per-pool autoscaler view, served at /pools/<namespace>/<name>/metrics on the
// admin port; gateway/poolview documents them and is what reads the view.
const (
	// PoolTokensInQueue is poolview.TokensInQueue.
	PoolTokensInQueue = poolview.TokensInQueue
	// PoolSessions is poolview.Sessions.
	PoolSessions = poolview.Sessions
	// PoolTTFT is poolview.TTFT.
	PoolTTFT = poolview.TTFT
	// PoolOfferedTokens is poolview.OfferedTokens.
	PoolOfferedTokens = poolview.OfferedTokens
)

// PoolStats keeps the per-pool view.
type PoolStats struct {
	mu    sync.Mutex
	pools map[route.PoolRef]*poolStat
}

type poolStat struct {
	ttft    map[string]*hist
	queued  map[string]int
	offered float64
}

type hist struct {
	counts []uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

// NewPoolStats returns an empty view.
func NewPoolStats() *PoolStats { return &PoolStats{pools: map[route.PoolRef]*poolStat{}} }

func (s *PoolStats) pool(p route.PoolRef) *poolStat {
	ps := s.pools[p]
	if ps == nil {
		ps = &poolStat{ttft: map[string]*hist{}, queued: map[string]int{}}
		s.pools[p] = ps
	}
	return ps
}

// ObserveTTFT records a TTFT of a request pod served.
func (s *PoolStats) ObserveTTFT(p route.PoolRef, pod string, seconds float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pool(p)
	h := ps.ttft[pod]
	if h == nil {
		h = &hist{counts: make([]uint64, len(TTFTBuckets))}
		ps.ttft[pod] = h
	}
	i := sort.SearchFloat64s(TTFTBuckets, seconds)
	if i < len(h.counts) {
		h.counts[i]++
	}
	h.count++
	h.sum += seconds
}

// ObserveArrival counts a request of tokens prompt tokens arriving at pool p.
func (s *PoolStats) ObserveArrival(p route.PoolRef, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pool(p).offered += float64(max(tokens, 0))
}

// Offered returns the prompt tokens counted at arrival at pool p so far.
func (s *PoolStats) Offered(p route.PoolRef) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ps, ok := s.pools[p]; ok {
		return ps.offered
	}
	return 0
}

// AddQueued adds tokens (negative to remove) waiting for pod ("" before a pod is chosen).
func (s *PoolStats) AddQueued(p route.PoolRef, pod string, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pool(p)
	ps.queued[pod] += tokens
	if ps.queued[pod] == 0 {
		delete(ps.queued, pod)
	}
}

// Queued returns the tokens waiting per pod of p.
func (s *PoolStats) Queued(p route.PoolRef) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	if ps, ok := s.pools[p]; ok {
		for k, v := range ps.queued {
			out[k] = v
		}
	}
	return out
}

// Forget drops the state of pods no longer in the pool (their histograms would otherwise live
// forever); keep lists the pods to keep.
func (s *PoolStats) Forget(p route.PoolRef, keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ps, ok := s.pools[p]; ok {
		for pod := range ps.ttft {
			if !keep[pod] {
				delete(ps.ttft, pod)
			}
		}
	}
}

// SessionCounter counts active sessions per pod of a pool; shared reports whether the count is
// shared by every gateway replica.
type SessionCounter func(ctx context.Context, pool route.PoolRef, pods []string) (counts map[string]int, shared bool)

// Handler serves /pools/{namespace}/{name}/metrics (and /pools/{name}/metrics for pools without
// a namespace, as in static-backends mode).
func (s *PoolStats) Handler(table *route.Table, sessions SessionCounter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ref := route.PoolRef{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
		pool, ok := table.Load().Pool(ref)
		if !ok {
			http.Error(w, "no such pool: "+ref.String(), http.StatusNotFound)
			return
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(&poolCollector{s: s, pool: pool, sessions: sessions, ctx: r.Context()})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

var (
	descQueue    = prometheus.NewDesc(PoolTokensInQueue, "Estimated prompt tokens of requests that have no first token yet.", []string{"pod"}, nil)
	descSessions = prometheus.NewDesc(PoolSessions, "Sessions active in the last 5 minutes, by pinned pod.", []string{"pod", "scope"}, nil)
	descTTFT     = prometheus.NewDesc(PoolTTFT, "TTFT of requests through the gateway, by pod.", []string{"pod"}, nil)
	descOffered  = prometheus.NewDesc(PoolOfferedTokens, "Estimated prompt tokens of the requests that arrived at the pool, counted at arrival.", []string{"pod"}, nil)
)

type poolCollector struct {
	s        *PoolStats
	pool     *route.Pool
	sessions SessionCounter
	ctx      context.Context
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descQueue
	ch <- descSessions
	ch <- descTTFT
	ch <- descOffered
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	pods := make([]string, len(c.pool.Endpoints))
	for i, e := range c.pool.Endpoints {
		pods[i] = e.Pod
	}
	counts, shared := c.sessions(c.ctx, c.pool.Ref, pods)
	scope := "replica"
	if shared {
		scope = "shared"
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	ps := c.s.pool(c.pool.Ref)
	ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(ps.queued[""]), "")
	ch <- prometheus.MustNewConstMetric(descOffered, prometheus.CounterValue, ps.offered, "")
	for _, pod := range pods {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(ps.queued[pod]), pod)
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(counts[pod]), pod, scope)
		h := ps.ttft[pod]
		buckets := make(map[float64]uint64, len(TTFTBuckets))
		var cum uint64
		var count uint64
		var sum float64
		if h != nil {
			count, sum = h.count, h.sum
		}
		for i, b := range TTFTBuckets {
			if h != nil {
				cum += h.counts[i]
			}
			buckets[b] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descTTFT, count, sum, buckets, pod)
	}
}
