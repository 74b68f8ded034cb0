package affinity

import (
	"container/list"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// ActivityWindow is how recent a session's last request must be for it to count as a concurrent
// session (seed 001: "sessions with activity in last 5m").
const ActivityWindow = 5 * time.Minute

// Memory is an in-process pin table bounded by an LRU: the table of a replica without Redis, and
// the fallback of the Redis table. It also tracks session activity per pod.
type Memory struct {
	mu    sync.Mutex
	max   int
	lru   *list.List // of *memPin, most recent first
	pins  map[memKey]*list.Element
	act   map[route.PoolRef]map[string]activity // pool -> key hash -> activity
	nowFn func() time.Time
	// touches counts activity records since the last sweep of old ones.
	touches int
}

type memKey struct {
	pool route.PoolRef
	key  string // key hash
}

type memPin struct {
	k       memKey
	pod     string
	expires time.Time
}

type activity struct {
	pod  string
	last time.Time
}

// NewMemory returns a table of at most max pins (max <= 0: 1,000,000). now is the clock (nil:
// time.Now).
func NewMemory(max int, now func() time.Time) *Memory {
	if max <= 0 {
		max = 1_000_000
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{max: max, lru: list.New(), pins: map[memKey]*list.Element{}, act: map[route.PoolRef]map[string]activity{}, nowFn: now}
}

// Lookup returns the pod pinned for the key hash, refreshing the pin's TTL, or "".
func (m *Memory) Lookup(pool route.PoolRef, keyHash string, ttl time.Duration) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowFn()
	e, ok := m.pins[memKey{pool, keyHash}]
	if !ok {
		return ""
	}
	p := e.Value.(*memPin)
	if now.After(p.expires) {
		m.lru.Remove(e)
		delete(m.pins, p.k)
		return ""
	}
	p.expires = now.Add(ttl)
	m.lru.MoveToFront(e)
	m.touch(pool, keyHash, p.pod, now)
	return p.pod
}

// Pin sets the pin of the key hash to pod.
func (m *Memory) Pin(pool route.PoolRef, keyHash, pod string, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowFn()
	k := memKey{pool, keyHash}
	if e, ok := m.pins[k]; ok {
		p := e.Value.(*memPin)
		p.pod, p.expires = pod, now.Add(ttl)
		m.lru.MoveToFront(e)
	} else {
		m.pins[k] = m.lru.PushFront(&memPin{k: k, pod: pod, expires: now.Add(ttl)})
		for m.lru.Len() > m.max {
			old := m.lru.Back()
			m.lru.Remove(old)
			delete(m.pins, old.Value.(*memPin).k)
		}
	}
	m.touch(pool, keyHash, pod, now)
}

// touch records activity; m.mu is held.
func (m *Memory) touch(pool route.PoolRef, keyHash, pod string, now time.Time) {
	a := m.act[pool]
	if a == nil {
		a = map[string]activity{}
		m.act[pool] = a
	}
	a[keyHash] = activity{pod: pod, last: now}
	if m.touches++; m.touches >= sweepEvery {
		m.touches = 0
		from := now.Add(-ActivityWindow)
		for _, pa := range m.act {
			for k, v := range pa {
				if v.last.Before(from) {
					delete(pa, k)
				}
			}
		}
	}
}

// sweepEvery is how many activity records pass between sweeps of expired ones, which bounds the
// activity table even when nobody reads it.
const sweepEvery = 4096

// Active counts, per pod, the sessions of pool active within ActivityWindow, and forgets older
// activity.
func (m *Memory) Active(pool route.PoolRef) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := m.nowFn().Add(-ActivityWindow)
	out := map[string]int{}
	for k, a := range m.act[pool] {
		if a.last.Before(from) {
			delete(m.act[pool], k)
			continue
		}
		out[a.pod]++
	}
	return out
}

// Len is the number of pins held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}
