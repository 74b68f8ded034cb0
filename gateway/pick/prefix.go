package pick

import (
	"container/list"
	"hash/maphash"
	"sync"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// PodsPerBlock is how many pods an index entry remembers (the most recent first).
const PodsPerBlock = 4

// PrefixIndex is an approximate prefix-cache index built from routing history. A prompt is cut
// into fixed-size blocks (BlockBytes bytes, about BlockBytes/4 tokens); block i's hash chains
// the pool and every block before it, so equal hashes mean equal prefixes. Each entry remembers
// the pods that were sent that prefix most recently. Entries are bounded by an LRU.
type PrefixIndex struct {
	blockBytes int
	max        int
	seed       maphash.Seed

	mu  sync.Mutex
	lru *list.List // of *prefixEntry, most recent first
	m   map[uint64]*list.Element
}

type prefixEntry struct {
	h    uint64
	pods [PodsPerBlock]string
}

// NewPrefixIndex returns an index of at most maxEntries blocks of blockBytes bytes.
func NewPrefixIndex(blockBytes, maxEntries int) *PrefixIndex {
	if blockBytes <= 0 {
		blockBytes = 256
	}
	if maxEntries <= 0 {
		maxEntries = 1 << 17
	}
	return &PrefixIndex{blockBytes: blockBytes, max: maxEntries, seed: maphash.MakeSeed(),
		lru: list.New(), m: map[uint64]*list.Element{}}
}

// Blocks returns the chained hashes of the full blocks of text for pool (a trailing partial
// block is not indexed: a model server caches whole blocks only).
func (x *PrefixIndex) Blocks(pool route.PoolRef, text string) []uint64 {
	n := len(text) / x.blockBytes
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	var h maphash.Hash
	h.SetSeed(x.seed)
	_, _ = h.WriteString(pool.String())
	prev := h.Sum64()
	for i := 0; i < n; i++ {
		h.Reset()
		var b [8]byte
		for j := 0; j < 8; j++ {
			b[j] = byte(prev >> (8 * j))
		}
		_, _ = h.Write(b[:])
		_, _ = h.WriteString(text[i*x.blockBytes : (i+1)*x.blockBytes])
		prev = h.Sum64()
		out[i] = prev
	}
	return out
}

// Match returns, per pod, how many leading blocks of blocks it was sent most recently.
func (x *PrefixIndex) Match(blocks []uint64) map[string]int {
	out := map[string]int{}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, h := range blocks {
		e, ok := x.m[h]
		if !ok {
			break
		}
		for _, p := range e.Value.(*prefixEntry).pods {
			if p != "" {
				out[p] = i + 1
			}
		}
	}
	return out
}

// Record notes that pod was sent the prompt of blocks.
func (x *PrefixIndex) Record(blocks []uint64, pod string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range blocks {
		if el, ok := x.m[h]; ok {
			e := el.Value.(*prefixEntry)
			e.add(pod)
			x.lru.MoveToFront(el)
			continue
		}
		e := &prefixEntry{h: h}
		e.pods[0] = pod
		x.m[h] = x.lru.PushFront(e)
		for x.lru.Len() > x.max {
			old := x.lru.Back()
			x.lru.Remove(old)
			delete(x.m, old.Value.(*prefixEntry).h)
		}
	}
}

// Len is the number of blocks held.
func (x *PrefixIndex) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lru.Len()
}

// add puts pod first, keeping the others in recency order.
func (e *prefixEntry) add(pod string) {
	i := 0
	for i < PodsPerBlock-1 && e.pods[i] != pod {
		i++
	}
	copy(e.pods[1:i+1], e.pods[:i])
	e.pods[0] = pod
}
