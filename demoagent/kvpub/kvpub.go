// Package kvpub publishes the demo agent's KV-cache events as vLLM does with
// --kv-events-config: a Recorder collects the cache model's events (kvcache.Observer) and Run
// sends them, in batches, on a ZeroMQ PUB socket (gateway/kvevents). Block hashes are the
// cache's own (kvcache.BlockHashes over the agent's token ids), sent as integers like vLLM's
// older releases; token ids are not sent (they would reveal prompts to every subscriber).
package kvpub

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/gateway/kvevents"
)

// Sender sends one batch (kvevents.Publisher in production).
type Sender interface {
	Publish(kvevents.Batch) error
}

// Recorder buffers events until Run sends them. It is safe for concurrent use.
type Recorder struct {
	blockSize int
	kick      chan struct{}

	mu     sync.Mutex
	events []kvevents.Event
}

// NewRecorder returns a recorder for a cache of blockSize-token blocks.
func NewRecorder(blockSize int) *Recorder {
	return &Recorder{blockSize: blockSize, kick: make(chan struct{}, 1)}
}

func hashes(h []uint64) []kvevents.Hash {
	out := make([]kvevents.Hash, len(h))
	for i, x := range h {
		out[i] = kvevents.IntHash(x)
	}
	return out
}

func (r *Recorder) add(e kvevents.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Stored records a BlockStored event.
func (r *Recorder) Stored(h []uint64, parent uint64, hasParent bool) {
	e := kvevents.Event{Kind: kvevents.TagBlockStored, Hashes: hashes(h), BlockSize: r.blockSize, TokenIDs: []uint32{}}
	if hasParent {
		e.Parent = kvevents.IntHash(parent)
	}
	r.add(e)
}

// Removed records a BlockRemoved event.
func (r *Recorder) Removed(h []uint64) {
	r.add(kvevents.Event{Kind: kvevents.TagBlockRemoved, Hashes: hashes(h)})
}

// Cleared records an AllBlocksCleared event.
func (r *Recorder) Cleared() { r.add(kvevents.Event{Kind: kvevents.TagAllBlocksCleared}) }

// take returns and forgets the buffered events.
func (r *Recorder) take() []kvevents.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// Run sends what was recorded, one batch per wake-up, until ctx ends. A failed send is logged
// and its events dropped: subscribers see the sequence gap and start over.
func (r *Recorder) Run(ctx context.Context, s Sender, clk clock.Clock) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		ev := r.take()
		if len(ev) == 0 {
			continue
		}
		ts := float64(clk.Now().UnixNano()) / float64(time.Second)
		if err := s.Publish(kvevents.Batch{TS: ts, Events: ev, DPRank: -1}); err != nil {
			klog.FromContext(ctx).Error(err, "Publishing KV events failed", "events", len(ev))
		}
	}
}
