package egress

import (
	"sync"
	"time"
)

// FailureCache remembers recent failures per key for a TTL, so that a caller does not retry a
// failing or stalling remote on every request. It is safe for concurrent use.
type FailureCache[K comparable] struct {
	// TTL is how long a failure is remembered (DefaultFailureTTL when 0).
	TTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu sync.Mutex
	m  map[K]failure
}

// DefaultFailureTTL is how long a FailureCache remembers a failure by default.
const DefaultFailureTTL = 30 * time.Second

type failure struct {
	err error
	at  time.Time
}

func (c *FailureCache[K]) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Get returns the failure remembered for k and whether one is still fresh.
func (c *FailureCache[K]) Get(k K) (error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.m[k]
	if !ok {
		return nil, false
	}
	if c.now().Sub(f.at) >= orDefault(c.TTL, DefaultFailureTTL) {
		delete(c.m, k)
		return nil, false
	}
	return f.err, true
}

// Put remembers err for k; a nil err forgets k.
func (c *FailureCache[K]) Put(k K, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		delete(c.m, k)
		return
	}
	if c.m == nil {
		c.m = map[K]failure{}
	}
	// Bound the map: expired entries go first, then everything (a flood of distinct keys).
	if len(c.m) >= 10_000 {
		ttl := orDefault(c.TTL, DefaultFailureTTL)
		for key, f := range c.m {
			if c.now().Sub(f.at) >= ttl {
				delete(c.m, key)
			}
		}
		if len(c.m) >= 10_000 {
			clear(c.m)
		}
	}
	c.m[k] = failure{err: err, at: c.now()}
}
