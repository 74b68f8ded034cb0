// Package kvindex is the gateway's exact view of each pod's prefix cache, built from the KV
// events the pod's engine publishes (vLLM's --kv-events-config; the demo agent's
// --kv-events-endpoint): Subscriber keeps one ZeroMQ subscription per endpoint that names a KV
// event address, Index applies the events to a per-pod set of block hashes, and Prompt maps a
// request to block hashes the way the engine computes them, so that a pod's cached prefix of a
// prompt is known exactly. A pod that has sent nothing is not exact: callers fall back to their
// approximate index for it.
package kvindex

import (
	"sync"

	"github.com/neuronetes/neuronetes/gateway/kvevents"
)

// DefaultMaxBlocks bounds one pod's index: a pod that claims more blocks than this is cleared
// rather than let grow the gateway's memory (about 32 GiB of KV in 16-token blocks of an 8B
// model is 2^21 blocks).
const DefaultMaxBlocks = 1 << 22

// Index holds the cached block hashes of every subscribed pod, keyed by its KV event address.
// It is safe for concurrent use.
type Index struct {
	// MaxBlocks bounds each pod's set (DefaultMaxBlocks when 0).
	MaxBlocks int

	mu   sync.RWMutex
	pods map[string]*podIndex
}

type podIndex struct {
	blocks    map[kvevents.Hash]struct{}
	blockSize int
	seq       uint64
	// live: a message arrived since the last (re)connect, so seq is the last one seen.
	live bool
	// exact: the pod has published since it was subscribed; its index is the engine's view.
	exact bool
}

// Result says what Apply did.
type Result int

// Apply's results.
const (
	// Applied: the batch extended the pod's sequence and was applied.
	Applied Result = iota
	// Gap: a sequence number was skipped (or went back, an engine restart): the pod's index
	// was cleared, then the batch applied.
	Gap
	// Overflow: the pod's index passed MaxBlocks and was cleared.
	Overflow
)

func (x *Index) pod(key string) *podIndex {
	if x.pods == nil {
		x.pods = map[string]*podIndex{}
	}
	p := x.pods[key]
	if p == nil {
		p = &podIndex{blocks: map[kvevents.Hash]struct{}{}}
		x.pods[key] = p
	}
	return p
}

// Connected notes a new connection to key: messages sent while disconnected are lost, so the
// pod's index is cleared and the next message starts its sequence.
func (x *Index) Connected(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.pod(key)
	clear(p.blocks)
	p.live = false
}

// Forget drops key's index (the pod left the routing table).
func (x *Index) Forget(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.pods, key)
}

// Apply applies one message of key's publisher (ignored unless Connected was called for key).
func (x *Index) Apply(key string, m kvevents.Message) Result {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.pods[key]
	if p == nil { // not connected, or forgotten while a message was on its way
		return Applied
	}
	res := Applied
	if p.live && m.Seq != p.seq+1 {
		clear(p.blocks)
		res = Gap
	}
	p.seq, p.live, p.exact = m.Seq, true, true
	limit := x.MaxBlocks
	if limit <= 0 {
		limit = DefaultMaxBlocks
	}
	for _, e := range m.Batch.Events {
		if !onDevice(e.Medium) {
			continue
		}
		switch e.Kind {
		case kvevents.TagBlockStored:
			if e.BlockSize > 0 {
				p.blockSize = e.BlockSize
			}
			for _, h := range e.Hashes {
				p.blocks[h] = struct{}{}
			}
		case kvevents.TagBlockRemoved:
			for _, h := range e.Hashes {
				delete(p.blocks, h)
			}
		case kvevents.TagAllBlocksCleared:
			clear(p.blocks)
		}
	}
	if len(p.blocks) > limit {
		clear(p.blocks)
		res = Overflow
	}
	return res
}

// onDevice: the event is about the engine's GPU cache (vLLM names offloaded tiers in medium).
func onDevice(medium string) bool { return medium == "" || medium == "GPU" || medium == "gpu" }

// Match returns how many leading blocks of prompt key's pod has cached, the pod's block size,
// and whether the pod is exact (has published since it was subscribed, with a block size). When
// it is not, blocks is 0 and the caller should use its approximate index.
func (x *Index) Match(key string, prompt *Prompt) (blocks, blockSize int, exact bool) {
	if key == "" || prompt == nil {
		return 0, 0, false
	}
	x.mu.RLock()
	p := x.pods[key]
	if p == nil || !p.exact || p.blockSize <= 0 {
		x.mu.RUnlock()
		return 0, 0, false
	}
	bs := p.blockSize
	x.mu.RUnlock()
	hs := prompt.Hashes(bs) // hashed outside the lock; cached per block size
	x.mu.RLock()
	defer x.mu.RUnlock()
	if p = x.pods[key]; p == nil {
		return 0, bs, false
	}
	n := 0
	for n < len(hs) {
		if _, ok := p.blocks[hs[n]]; !ok {
			break
		}
		n++
	}
	return n, bs, true
}

// Exact reports whether key's pod has published since it was subscribed.
func (x *Index) Exact(key string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p := x.pods[key]
	return p != nil && p.exact
}

// Blocks is the number of blocks indexed for key.
func (x *Index) Blocks(key string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if p := x.pods[key]; p != nil {
		return len(p.blocks)
	}
	return 0
}
