package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// refresher defers refresh-on-read TTL resets off the read path: Get
// records the id, and Run's loop resets every recorded entry's TTL to its
// own stored TTL (touchScript) in batches every touchEvery.
//
// Invariant: an id is deferred only while the loop runs and only when the
// entry's remaining TTL, read in the same round trip as the entry, exceeds
// margin (several flush intervals); otherwise Get refreshes synchronously.
// A read entry therefore never expires for want of its refresh.
type refresher struct {
	running atomic.Bool
	margin  atomic.Int64 // time.Duration; valid while running

	mu      sync.Mutex
	touched map[string]struct{}
}

// deferOK reports whether a refresh of an entry with remaining TTL left may
// be deferred to the loop.
func (r *refresher) deferOK(left time.Duration) bool {
	return r.running.Load() && left > time.Duration(r.margin.Load())
}

func (r *refresher) touch(id string) {
	r.mu.Lock()
	if r.touched == nil {
		r.touched = map[string]struct{}{}
	}
	r.touched[id] = struct{}{}
	r.mu.Unlock()
}

func (r *refresher) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.touched))
	for id := range r.touched {
		ids = append(ids, id)
	}
	clear(r.touched)
	return ids
}

// run flushes touches every every until ctx ends, then flushes once more.
func (r *refresher) run(ctx context.Context, s *Store, every time.Duration) {
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	// A deferred touch lands at most one interval plus one Redis call
	// later; four intervals and a second leave room for a slow flush.
	r.margin.Store(int64(4*every + time.Second))
	r.running.Store(true)
	log := klog.FromContext(ctx).WithValues("tenant", s.tenant)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.running.Store(false)
			// Reads that deferred before the flag dropped are still owed.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			r.flush(fctx, s, log)
			cancel()
			return
		case <-t.C:
		}
		r.flush(ctx, s, log)
	}
}

func (r *refresher) flush(ctx context.Context, s *Store, log klog.Logger) {
	ids := r.take()
	for len(ids) > 0 {
		n := min(len(ids), 256)
		keys := make([]string, n)
		for i, id := range ids[:n] {
			keys[i] = s.Key(id)
		}
		start := time.Now()
		err := touchScript.Run(ctx, s.rdb, keys).Err()
		s.observe("touch", start, err)
		if err != nil {
			log.V(2).Info("ttl refresh failed", "err", err, "entries", n)
		} else {
			s.near.extend(ids[:n], start)
		}
		ids = ids[n:]
	}
}
