package dedupe

import (
	"context"
	"sync"
	"time"
)

// Batcher adds counter increments up in memory and writes them to a Store's shared counters
// together, so that counting costs no round trip per message.
type Batcher struct {
	// Store receives the sums.
	Store Store

	mu      sync.Mutex
	pending map[string]map[string]int64
}

// Add counts one event of a binding (worker.Counter).
func (b *Batcher) Add(binding, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = map[string]map[string]int64{}
	}
	m := b.pending[binding]
	if m == nil {
		m = map[string]int64{}
		b.pending[binding] = m
	}
	m[name]++
}

// Flush writes the pending sums; those that fail are kept for the next flush.
func (b *Batcher) Flush(ctx context.Context) error {
	b.mu.Lock()
	p := b.pending
	b.pending = nil
	b.mu.Unlock()
	var first error
	for binding, d := range p {
		if err := b.Store.Count(ctx, binding, d); err != nil {
			if first == nil {
				first = err
			}
			b.mu.Lock()
			for k, v := range d {
				if b.pending == nil {
					b.pending = map[string]map[string]int64{}
				}
				if b.pending[binding] == nil {
					b.pending[binding] = map[string]int64{}
				}
				b.pending[binding][k] += v
			}
			b.mu.Unlock()
		}
	}
	return first
}

// Run flushes every period until ctx ends, then once more.
func (b *Batcher) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = b.Flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			_ = b.Flush(ctx)
		}
	}
}
