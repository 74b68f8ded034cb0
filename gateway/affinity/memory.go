package affinity

import (
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/lru"
)

// ActivityWindow is how recent a session's last request must be for it to count as a concurrent
// session (seed 001: "sessions with activity in last 5m").
const ActivityWindow = 5 * time.Minute

// Memory is an in-process pin table bounded by an LRU: the table of a replica without Redis, and
// the fallback of the Redis table. It also tracks session activity per pod, in a second LRU of
// the same bound.
//
// Invariants, under mu: act is ordered by last activity (a touch moves a session to the front),
// so expired activity is always at its back and is dropped from there, a few entries per call,
// never by a sweep of the whole table; counts[pool][pod] is the number of sessions of pool in act
// whose pod is pod.
type Memory struct {
	mu     sync.Mutex
	pins   *lru.Cache[memKey, memPin]
	act    *lru.Cache[memKey, activity]
	counts map[route.PoolRef]map[string]int
	nowFn  func() time.Time
}

type memKey struct {
	pool route.PoolRef
	key  string // key hash
}

type memPin struct {
	pod     string
	expires time.Time
}

type activity struct {
	pod  string
	last time.Time
}

// NewMemory returns a table of at most max pins and max sessions' activity (max <= 0:
// 1,000,000). now is the clock (nil: time.Now).
func NewMemory(max int, now func() time.Time) *Memory {
	if max <= 0 {
		max = 1_000_000
	}
	if now == nil {
		now = time.Now
	}
	m := &Memory{counts: map[route.PoolRef]map[string]int{}, nowFn: now}
	m.pins = lru.New[memKey, memPin](max, nil)
	m.act = lru.New(max, func(k memKey, a activity) { m.uncount(k.pool, a.pod) })
	return m
}

// Lookup returns the pod pinned for the key hash, refreshing the pin's TTL, or "".
func (m *Memory) Lookup(pool route.PoolRef, keyHash string, ttl time.Duration) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowFn()
	k := memKey{pool, keyHash}
	p, ok := m.pins.Get(k)
	if !ok {
		return ""
	}
	if now.After(p.expires) {
		m.pins.Remove(k)
		return ""
	}
	p.expires = now.Add(ttl)
	m.pins.Put(k, p)
	m.touch(k, p.pod, now)
	return p.pod
}

// peek returns the pod pinned for the key hash ("" when none) without refreshing anything.
func (m *Memory) peek(pool route.PoolRef, keyHash string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pins.Peek(memKey{pool, keyHash})
	if !ok || m.nowFn().After(p.expires) {
		return ""
	}
	return p.pod
}

// Pin sets the pin of the key hash to pod.
func (m *Memory) Pin(pool route.PoolRef, keyHash, pod string, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowFn()
	k := memKey{pool, keyHash}
	m.pins.Put(k, memPin{pod: pod, expires: now.Add(ttl)})
	m.touch(k, pod, now)
}

// touch records activity and drops expired activity from the back; m.mu is held.
func (m *Memory) touch(k memKey, pod string, now time.Time) {
	if old, ok := m.act.Remove(k); ok {
		m.uncount(k.pool, old.pod)
	}
	m.act.Put(k, activity{pod: pod, last: now})
	c := m.counts[k.pool]
	if c == nil {
		c = map[string]int{}
		m.counts[k.pool] = c
	}
	c[pod]++
	m.expire(now)
}

// expire drops the activity older than ActivityWindow; m.mu is held. Each entry is dropped once,
// so the cost is spread over the touches that added them.
func (m *Memory) expire(now time.Time) {
	from := now.Add(-ActivityWindow)
	for {
		_, a, ok := m.act.Oldest()
		if !ok || !a.last.Before(from) {
			return
		}
		m.act.RemoveOldest()
	}
}

// uncount takes one session of pool off pod; m.mu is held.
func (m *Memory) uncount(pool route.PoolRef, pod string) {
	c := m.counts[pool]
	if c[pod]--; c[pod] <= 0 {
		delete(c, pod)
	}
	if len(c) == 0 {
		delete(m.counts, pool)
	}
}

// Active counts, per pod, the sessions of pool active within ActivityWindow.
func (m *Memory) Active(pool route.PoolRef) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(m.nowFn())
	out := make(map[string]int, len(m.counts[pool]))
	for pod, n := range m.counts[pool] {
		out[pod] = n
	}
	return out
}

// Len is the number of pins held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pins.Len()
}

// activeLen is the number of sessions whose activity is held.
func (m *Memory) activeLen() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.act.Len()
}
