package store

import (
	"container/list"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// nearCache keeps decoded hot sessions in the sidecar. Coherence invariant:
// an entry is served only while the invalidation subscription is live
// (enabled), only before the deadline at which Redis expires the key (its
// PTTL, read in the same round trip as the entry, or the TTL this sidecar
// just wrote, counted from before the call), and only entries whose version
// is at least the highest version announced for that id are kept. Every
// write publishes its version in the same Lua script that performs it, so a
// served entry is at most one pub/sub delivery behind Redis, never outlives
// the key, and is never older than maxAge. Expiry needs no message: every
// sidecar holds the deadline. A nil *nearCache is a disabled cache; all
// methods are no-ops on it.
type nearCache struct {
	mu      sync.Mutex
	budget  int
	used    int
	maxAge  time.Duration
	ll      *list.List // front = most recently used
	items   map[string]*list.Element
	enabled atomic.Bool
	gen     atomic.Uint64 // bumped on every invalidation and reset
}

type nearEntry struct {
	id      string
	version int64 // for tombstones: the highest announced version
	data    []byte
	ttl     time.Duration
	stored  time.Time
	// deadline is when Redis expires the key at the earliest (zero: the key
	// has no expiry).
	deadline time.Time
	tomb     bool
}

// live reports whether e may be served at now.
func (e *nearEntry) live(now time.Time, maxAge time.Duration) bool {
	return !e.tomb && now.Sub(e.stored) <= maxAge && (e.deadline.IsZero() || now.Before(e.deadline))
}

func newNearCache(budget int, maxAge time.Duration) *nearCache {
	return &nearCache{budget: budget, maxAge: maxAge, ll: list.New(), items: map[string]*list.Element{}}
}

func (e *nearEntry) size() int { return len(e.data) + len(e.id) + 96 }

func (c *nearCache) generation() uint64 {
	if c == nil {
		return 0
	}
	return c.gen.Load()
}

func (c *nearCache) get(id string) (*nearEntry, bool) {
	if c == nil || !c.enabled.Load() {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[id]
	if !ok {
		return nil, false
	}
	e := el.Value.(*nearEntry)
	if !e.live(time.Now(), c.maxAge) {
		if !e.tomb {
			c.removeLocked(el) // expired: the next read goes to Redis
		}
		return nil, false
	}
	c.ll.MoveToFront(el)
	return e, true
}

// put stores s, which Redis expires at deadline (zero: never), unless an
// invalidation happened since gen was read and announced a newer version
// (then the fetched data may be stale).
func (c *nearCache) put(id string, s *Session, deadline time.Time, gen uint64) {
	if c == nil || !c.enabled.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[id]; ok {
		old := el.Value.(*nearEntry)
		if old.version > s.Version {
			return
		}
		c.removeLocked(el)
	} else if c.gen.Load() != gen {
		// An invalidation for an id we hold no tombstone for (evicted) may
		// have raced with this fetch; skip caching rather than risk staleness.
		return
	}
	e := &nearEntry{id: id, version: s.Version, data: s.Data, ttl: s.TTL, stored: time.Now(), deadline: deadline}
	if e.size() > c.budget {
		return
	}
	c.items[id] = c.ll.PushFront(e)
	c.used += e.size()
	for c.used > c.budget {
		c.removeLocked(c.ll.Back())
	}
}

// invalidate records that version v of id exists (or a delete at v).
func (c *nearCache) invalidate(id string, v int64) {
	if c == nil {
		return
	}
	c.gen.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[id]; ok {
		e := el.Value.(*nearEntry)
		if e.version >= v {
			return
		}
		c.removeLocked(el)
	}
	t := &nearEntry{id: id, version: v, tomb: true, stored: time.Now()}
	c.items[id] = c.ll.PushFront(t)
	c.used += t.size()
	for c.used > c.budget {
		c.removeLocked(c.ll.Back())
	}
}

// forget drops whatever is cached for id: a conditional write found Redis
// holding another version (or none), so the entry is stale whatever its
// version says.
func (c *nearCache) forget(id string) {
	if c == nil {
		return
	}
	c.gen.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[id]; ok {
		c.removeLocked(el)
	}
}

// extend moves the deadlines of the cached entries of ids to from+their TTL
// when later: a refresh-on-read flush that started at from reset each key's
// expiry to its own TTL.
func (c *nearCache) extend(ids []string, from time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if el, ok := c.items[id]; ok {
			if e := el.Value.(*nearEntry); !e.tomb && !e.deadline.IsZero() && from.Add(e.ttl).After(e.deadline) {
				e.deadline = from.Add(e.ttl)
			}
		}
	}
}

func (c *nearCache) removeLocked(el *list.Element) {
	e := el.Value.(*nearEntry)
	c.ll.Remove(el)
	delete(c.items, e.id)
	c.used -= e.size()
}

func (c *nearCache) reset(enabled bool) {
	c.gen.Add(1)
	c.mu.Lock()
	c.ll.Init()
	c.items = map[string]*list.Element{}
	c.used = 0
	c.mu.Unlock()
	c.enabled.Store(enabled)
}

// Run serves the store's background work until ctx ends: it flushes the
// deferred refresh-on-read TTL touches every touchEvery (see refresh.go)
// and, with a near cache, subscribes to the tenant's invalidation channel
// (the cache is enabled only while subscribed, and emptied on every
// (re)subscription).
func (s *Store) Run(ctx context.Context, touchEvery time.Duration) {
	if s.opts.RefreshOnRead {
		go s.refresher.run(ctx, s, touchEvery)
	}
	c := s.near
	if c == nil {
		<-ctx.Done()
		return
	}
	log := klog.FromContext(ctx).WithValues("tenant", s.tenant)
	for ctx.Err() == nil {
		s.subscribe(ctx, log)
		c.reset(false)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Store) subscribe(ctx context.Context, log klog.Logger) {
	c := s.near
	ps := s.rdb.Subscribe(ctx, s.channel())
	defer ps.Close()
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks Receive on shutdown
	defer stop()
	// Receive (not Channel) so that a dropped connection ends the loop and
	// disables the cache instead of being retried silently underneath.
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			if isTimeout(err) {
				if perr := ps.Ping(ctx); perr == nil {
					continue
				}
			}
			if ctx.Err() == nil {
				log.V(2).Info("invalidation subscription lost; near cache off", "err", err)
			}
			return
		}
		switch m := msg.(type) {
		case *redisSubscription:
			if m.Kind == "subscribe" {
				c.reset(true)
				log.V(2).Info("invalidation subscription live; near cache on")
			}
		case *redisMessage:
			ver, id, ok := strings.Cut(m.Payload, " ")
			v, err := strconv.ParseInt(ver, 10, 64)
			if !ok || err != nil {
				continue
			}
			c.invalidate(id, v)
		}
	}
}
