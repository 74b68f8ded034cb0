package affinity

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// Store is the pin table of one gateway replica: the shared Redis table when one is configured,
// with the in-memory table always kept alongside.
//
// Failure mode (seed 002: "router falls back to a healthy load balancer on state failure"): a
// Redis error never fails a request. Lookups then answer from memory (or nothing), so the request
// is placed by the picker; pins written meanwhile are kept as dirty and written back to Redis
// once a probe succeeds. After an error, Redis is not asked again for RetryAfter, so an outage
// costs each request nothing.
type Store struct {
	// Mem is the in-memory table (required).
	Mem *Memory
	// Redis is the shared table (nil: memory only).
	Redis *RedisTable
	// Timeout bounds one Redis call (default 100 ms).
	Timeout time.Duration
	// RetryAfter is how long Redis is skipped after an error (default 1 s).
	RetryAfter time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnError is called with every Redis error (for metrics); optional.
	OnError func(op string, err error)

	mu        sync.Mutex
	downUntil time.Time
	dirty     map[memKey]dirtyPin
}

type dirtyPin struct {
	pod string
	ttl time.Duration
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Store) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return 100 * time.Millisecond
}

// redisUp reports whether Redis should be asked now.
func (s *Store) redisUp() bool {
	if s.Redis == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.now().Before(s.downUntil)
}

func (s *Store) failed(op string, err error) {
	retry := s.RetryAfter
	if retry <= 0 {
		retry = time.Second
	}
	s.mu.Lock()
	s.downUntil = s.now().Add(retry)
	s.mu.Unlock()
	if s.OnError != nil {
		s.OnError(op, err)
	}
}

// Shared reports whether pins are shared through Redis right now.
func (s *Store) Shared() bool { return s.redisUp() }

// Lookup returns the pod pinned for the session (by key hash), "" when none; the pin's TTL is
// refreshed and the session's activity recorded.
func (s *Store) Lookup(ctx context.Context, pool route.PoolRef, keyHash string, ttl time.Duration) string {
	if s.redisUp() {
		cctx, cancel := context.WithTimeout(ctx, s.timeout())
		pod, err := s.Redis.Lookup(cctx, pool, keyHash, ttl, s.now(), s.Mem.peek(pool, keyHash))
		cancel()
		if err == nil {
			if pod != "" {
				s.Mem.Pin(pool, keyHash, pod, ttl)
				return pod
			}
			// A pin made while Redis was down and not yet written back is still the session's.
			if s.isDirty(pool, keyHash) {
				return s.Mem.Lookup(pool, keyHash, ttl)
			}
			return ""
		}
		if ctx.Err() != nil {
			return ""
		}
		s.failed("lookup", err)
		klog.FromContext(ctx).V(2).Info("Pin lookup fell back to memory", "pool", pool.String(), "err", err)
	}
	return s.Mem.Lookup(pool, keyHash, ttl)
}

// Pin pins the session to pod. When Redis cannot take the write, the pin is kept for write-back.
func (s *Store) Pin(ctx context.Context, pool route.PoolRef, keyHash, pod string, ttl time.Duration) {
	s.Mem.Pin(pool, keyHash, pod, ttl)
	if s.Redis == nil {
		return
	}
	if s.redisUp() {
		cctx, cancel := context.WithTimeout(ctx, s.timeout())
		err := s.Redis.Pin(cctx, pool, keyHash, pod, ttl, s.now())
		cancel()
		if err == nil {
			return
		}
		s.failed("pin", err)
	}
	s.mu.Lock()
	if s.dirty == nil {
		s.dirty = map[memKey]dirtyPin{}
	}
	// Beyond MaxDirty, pins live in memory only until they are made again.
	if len(s.dirty) < MaxDirty {
		s.dirty[memKey{pool, keyHash}] = dirtyPin{pod, ttl}
	}
	s.mu.Unlock()
}

// MaxDirty bounds the pins kept for write-back during a Redis outage.
const MaxDirty = 100_000

func (s *Store) isDirty(pool route.PoolRef, keyHash string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.dirty[memKey{pool, keyHash}]
	return ok
}

// Active counts the concurrent sessions per pod of pool: from Redis (shared by every replica,
// shared=true) when it answers, else from this replica's memory.
func (s *Store) Active(ctx context.Context, pool route.PoolRef, pods []string) (counts map[string]int, shared bool) {
	if s.redisUp() {
		cctx, cancel := context.WithTimeout(ctx, 5*s.timeout())
		c, err := s.Redis.Active(cctx, pool, pods, s.now())
		cancel()
		if err == nil {
			return c, true
		}
		s.failed("active", err)
	}
	return s.Mem.Active(pool), false
}

// Dirty is the number of pins waiting for write-back.
func (s *Store) Dirty() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.dirty)
}

// Run writes dirty pins back to Redis every interval once Redis answers, until ctx ends.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	if s.Redis == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Flush(ctx)
		}
	}
}

// Flush probes Redis when it was down and writes the dirty pins back; it returns how many it
// wrote.
func (s *Store) Flush(ctx context.Context) int {
	if s.Redis == nil {
		return 0
	}
	s.mu.Lock()
	n := len(s.dirty)
	down := s.now().Before(s.downUntil)
	s.mu.Unlock()
	if n == 0 && !down {
		return 0
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout())
	err := s.Redis.Ping(cctx)
	cancel()
	if err != nil {
		s.failed("ping", err)
		return 0
	}
	s.mu.Lock()
	s.downUntil = time.Time{}
	batch := s.dirty
	s.dirty = nil
	s.mu.Unlock()
	written := 0
	for k, p := range batch {
		cctx, cancel := context.WithTimeout(ctx, s.timeout())
		err := s.Redis.Pin(cctx, k.pool, k.key, p.pod, p.ttl, s.now())
		cancel()
		if err != nil {
			s.failed("writeback", err)
			s.mu.Lock()
			if s.dirty == nil {
				s.dirty = map[memKey]dirtyPin{}
			}
			for k2, p2 := range batch {
				if _, newer := s.dirty[k2]; !newer {
					s.dirty[k2] = p2
				}
			}
			s.mu.Unlock()
			return written
		}
		written++
		delete(batch, k)
	}
	if written > 0 {
		klog.FromContext(ctx).Info("Pins written back to Redis", "count", written)
	}
	return written
}
