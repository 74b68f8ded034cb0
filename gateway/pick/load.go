// Package pick chooses the pod of a request that has no usable session pin: candidates under
// the bounded-load limit are scored by weighted scorers (the gateway's own in-flight requests
// and tokens, the model servers' scraped queue and KV-cache metrics, an approximate prefix-cache
// index of routing history, and the session key's consistent-hash rank), and the best wins.
package pick

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// Load counts this replica's in-flight requests and tokens per pod and per pool, and each pod's
// prefill backlog: the uncached prompt tokens of its requests that have no first token yet.
type Load struct {
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	pods  map[podKey]*counts
	pools map[route.PoolRef]int
	lanes map[podKey]*lane
}

type podKey struct {
	pool route.PoolRef
	pod  string
}

type counts struct {
	reqs, tokens, prefill int
	pending               int // requests without a first token yet
}

// lane is what this replica knows of a pod's prefill lane: its requests without a first token,
// oldest first, and the pod's prefill rate learnt from their first tokens. It outlives the pod's
// counts so that the rate survives idle spells.
type lane struct {
	queue     []*Lease
	lastFirst time.Time // when the lane was last seen free: busy until then
	rate      rateEstimate
	engine    float64 // the prefill rate the engine last reported (BacklogAt), 0 none
}

// NewLoad returns an empty tracker.
func NewLoad() *Load {
	return &Load{pods: map[podKey]*counts{}, pools: map[route.PoolRef]int{}, lanes: map[podKey]*lane{}}
}

// Lease is one request's share of a pod's load. Release is idempotent and safe to call from
// any goroutine.
type Lease struct {
	l       *Load
	k       podKey
	tokens  int
	prefill int
	sent    time.Time
	// alone: the pod had no other request of this replica without a first token when this one
	// was sent, so its time to first token is its own prefill (and fixed overheads), not a queue.
	alone bool
	first atomic.Bool
	done  atomic.Bool
}

func (l *Load) now() time.Time {
	if l.Now == nil {
		return time.Now()
	}
	return l.Now()
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
	le := &Lease{l: l, k: k, tokens: tokens, prefill: prefill, sent: l.now()}
	ln := l.lanes[k]
	if ln == nil {
		ln = &lane{}
		l.lanes[k] = ln
	}
	le.alone = len(ln.queue) == 0
	ln.queue = append(ln.queue, le)
	l.mu.Unlock()
	return le
}

// FirstToken ends the lease's prefill backlog (idempotent; Release ends it too).
func (le *Lease) FirstToken() {
	if le == nil || !le.first.CompareAndSwap(false, true) {
		return
	}
	now := le.l.now()
	le.l.mu.Lock()
	defer le.l.mu.Unlock()
	if c := le.l.pods[le.k]; c != nil {
		c.prefill -= le.prefill
		c.pending--
	}
	if ln := le.l.lanes[le.k]; ln != nil {
		free := now
		if i := slices.Index(ln.queue, le); i >= 0 {
			// The first token shows that the prefill has ended, not when: on a starved gateway
			// it is seen late. When the lane's schedule at a known rate ends it earlier, the lane
			// was free from then, and the requests behind it started then.
			rate := ln.engine
			if rate <= 0 {
				rate = ln.rate.tokensPerSecond()
			}
			if end, ok := scheduledEnd(ln.queue[:i+1], ln.lastFirst, rate); ok && end.Before(free) {
				free = end
			}
			ln.queue = slices.Delete(ln.queue, i, i+1)
		}
		// Only a request that found the lane idle teaches the rate: its time to first token is
		// its own prefill (plus fixed overheads, so the rate is underestimated: safe). Queued
		// requests' first tokens can arrive in bursts when this process is starved of CPU,
		// which would make their service times look near zero.
		if le.alone && !le.done.Load() {
			ln.rate.observe(le.prefill, now.Sub(le.sent))
		}
		ln.lastFirst = later(ln.lastFirst, free)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ForgetLanes drops the lanes of pool's pods that are not in keep (the pool's routable pods) and
// have no pending request: a pod that left takes its learnt rate with it. A lane with pending
// requests stays until they end; its last Release then drops it, or a later ForgetLanes.
func (l *Load) ForgetLanes(pool route.PoolRef, keep map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, ln := range l.lanes {
		if k.pool == pool && !keep[k.pod] && len(ln.queue) == 0 {
			delete(l.lanes, k)
		}
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
	if ln := l.lanes[le.k]; ln != nil && len(ln.queue) == 0 && ln.rate.seconds == 0 {
		delete(l.lanes, le.k) // nothing learnt to keep; a pod with a rate keeps its lane
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

// Backlog returns pod's pending prefill, in tokens: the uncached prompt tokens of this
// replica's requests there without a first token, less what the pod has computed of them by now.
// The pod computes prefills one after another, oldest first, so from the last first token seen
// (when its lane was free) each request is scheduled at the pod's learnt rate, starting when it
// was sent or when the one before it would end, whichever is later; what lies before now is
// computed. A first token seen late (a starved gateway, a slow network) thus does not hold up the
// requests behind it. Before a rate is learnt nothing is deducted.
func (l *Load) Backlog(pool route.PoolRef, pod string) int {
	b, _ := l.BacklogAt(pool, pod, 0)
	return b
}

// BacklogAt is Backlog with the pod's prefill rate given (tokens per second, from the engine's
// own metrics); 0 uses the rate learnt from first tokens. It returns the rate it used.
func (l *Load) BacklogAt(pool route.PoolRef, pod string, rate float64) (int, float64) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.lanes[podKey{pool, pod}]
	if ln == nil {
		return 0, rate
	}
	if ln.engine = rate; rate <= 0 {
		rate = ln.rate.tokensPerSecond()
	}
	return laneBacklog(ln.queue, ln.lastFirst, now, rate), rate
}

// QueuedFloor is the uncached prompt tokens of the newest n of this replica's requests on pod
// that have no first token yet. A pod whose engine reports n requests waiting (not admitted:
// vllm:num_requests_waiting) has at least these still to prefill, since the engine admits first
// come first served; the lane schedule of BacklogAt cannot see a pod whose batch slots are full,
// where requests wait for a decoding sequence to end rather than for the prefill lane.
func (l *Load) QueuedFloor(pool route.PoolRef, pod string, n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.lanes[podKey{pool, pod}]
	if ln == nil || n <= 0 {
		return 0
	}
	total := 0
	for _, le := range ln.queue[max(len(ln.queue)-n, 0):] {
		total += le.prefill
	}
	return total
}

// scheduledEnd is when the last of queue (oldest first) ends on a lane free from free on,
// computing rate tokens per second; false when the rate is unknown.
func scheduledEnd(queue []*Lease, free time.Time, rate float64) (time.Time, bool) {
	if rate <= 0 {
		return time.Time{}, false
	}
	t := free
	for _, le := range queue {
		t = later(t, le.sent).Add(time.Duration(float64(le.prefill) / rate * float64(time.Second)))
	}
	return t, true
}

// laneBacklog is the tokens of queue (oldest first) not computed by now on a lane free from
// free on, computing rate tokens per second (0: unknown, nothing computed).
func laneBacklog(queue []*Lease, free, now time.Time, rate float64) int {
	total := 0
	t := free
	for _, le := range queue {
		if rate <= 0 {
			total += le.prefill
			continue
		}
		start := later(t, le.sent)
		end := start.Add(time.Duration(float64(le.prefill) / rate * float64(time.Second)))
		t = end
		switch {
		case !end.After(now):
		case start.Before(now):
			total += min(le.prefill, int(rate*end.Sub(now).Seconds()+0.5))
		default:
			total += le.prefill
		}
	}
	return total
}

// rateEstimate is a prefill rate: tokens over time, both decayed by rateDecay per observation so
// that it follows the pod.
type rateEstimate struct{ tokens, seconds float64 }

const rateDecay = 0.9

// observe adds one request's prefill tokens served in d. Requests that computed almost nothing
// (a cached prompt) carry mostly fixed overhead and are left out, as are times under a
// millisecond (no prefill of prefillFloor tokens is that fast; such a sample is noise).
func (r *rateEstimate) observe(tokens int, d time.Duration) {
	if tokens < prefillFloor || d < time.Millisecond {
		return
	}
	r.tokens = rateDecay*r.tokens + float64(tokens)
	r.seconds = rateDecay*r.seconds + d.Seconds()
}

func (r rateEstimate) tokensPerSecond() float64 {
	if r.seconds <= 0 {
		return 0
	}
	return r.tokens / r.seconds
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
