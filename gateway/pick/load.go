// Package pick chooses the pod of a request that has no usable session pin: candidates under
// the bounded-load limit are scored by weighted scorers (the gateway's own in-flight requests
// and tokens, the model servers' scraped queue and KV-cache metrics, an approximate prefix-cache
// index of routing history, and the session key's consistent-hash rank), and the best wins.
package pick

import (
	"sync"
	"sync/atomic"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// Load counts this replica's in-flight requests and tokens per pod and per pool, and each pod's
// prefill backlog: the uncached prompt tokens of its requests that have no first token yet.
type Load struct {
	mu    sync.Mutex
	pods  map[podKey]*counts
	pools map[route.PoolRef]int
}

type podKey struct {
	pool route.PoolRef
	pod  string
}

type counts struct {
	reqs, tokens, prefill int
	pending               int // requests without a first token yet
}

// NewLoad returns an empty tracker.
func NewLoad() *Load {
	return &Load{pods: map[podKey]*counts{}, pools: map[route.PoolRef]int{}}
}

// Lease is one request's share of a pod's load. Release is idempotent and safe to call from
// any goroutine.
type Lease struct {
	l       *Load
	k       podKey
	tokens  int
	prefill int
	first   atomic.Bool
	done    atomic.Bool
}

// Acquire counts a request of tokens (estimated prompt and completion) on pod, prefill of which
// (its uncached prompt tokens) are backlog until FirstToken.
func (l *Load) Acquire(pool route.PoolRef, pod string, tokens, prefill int) *Lease {
	k := podKey{pool, pod}
	l.mu.Lock()
	c := l.pods[k]
	if c == nil {
		c = &counts{}
		l.pods[k] = c
	}
	c.reqs++
	c.tokens += tokens
	c.prefill += prefill
	c.pending++
	l.pools[pool]++
	l.mu.Unlock()
	return &Lease{l: l, k: k, tokens: tokens, prefill: prefill}
}

// FirstToken ends the lease's prefill backlog (idempotent; Release ends it too).
func (le *Lease) FirstToken() {
	if le == nil || !le.first.CompareAndSwap(false, true) {
		return
	}
	le.l.mu.Lock()
	defer le.l.mu.Unlock()
	if c := le.l.pods[le.k]; c != nil {
		c.prefill -= le.prefill
		c.pending--
	}
}

// Pod returns the lease's pod.
func (le *Lease) Pod() string { return le.k.pod }

// Release returns the lease's load.
func (le *Lease) Release() {
	if le == nil || !le.done.CompareAndSwap(false, true) {
		return
	}
	le.FirstToken()
	l := le.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.pods[le.k]; c != nil {
		c.reqs--
		c.tokens -= le.tokens
		if c.reqs <= 0 {
			delete(l.pods, le.k)
		}
	}
	if l.pools[le.k.pool]--; l.pools[le.k.pool] <= 0 {
		delete(l.pools, le.k.pool)
	}
}

// Pod returns the in-flight requests, tokens and prefill backlog of pod.
func (l *Load) Pod(pool route.PoolRef, pod string) (reqs, tokens, prefill int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.pods[podKey{pool, pod}]; c != nil {
		return c.reqs, c.tokens, c.prefill
	}
	return 0, 0, 0
}

// Pending returns the requests of pod that have no first token yet.
func (l *Load) Pending(pool route.PoolRef, pod string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.pods[podKey{pool, pod}]; c != nil {
		return c.pending
	}
	return 0
}

// Pool returns the in-flight requests of pool.
func (l *Load) Pool(pool route.PoolRef) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pools[pool]
}

// Total returns the in-flight requests of every pool.
func (l *Load) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.pools {
		n += v
	}
	return n
}

// Pods returns the in-flight requests and tokens of each pod of pool with any.
func (l *Load) Pods(pool route.PoolRef) map[string][2]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][2]int{}
	for k, c := range l.pods {
		if k.pool == pool {
			out[k.pod] = [2]int{c.reqs, c.tokens}
		}
	}
	return out
}
