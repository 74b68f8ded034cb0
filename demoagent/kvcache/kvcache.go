// Package kvcache models a paged KV cache with automatic prefix caching, the way vLLM's block
// manager does it: memory is a fixed number of blocks of a fixed number of tokens; a full block is
// identified by a hash chained over every token before it, so equal hashes mean equal prefixes;
// sequences share cached blocks by reference count; a block no sequence references stays cached
// until an allocation needs its space, least recently used first.
//
// A Pool is not safe for concurrent use; its owner serializes calls.
package kvcache

import (
	"container/list"
	"fmt"
)

// Hash of the empty prefix, the seed of every chain.
const chainSeed uint64 = 0xcbf29ce484222325

// BlockHashes returns the chained hashes of the full blocks of tokens: element i identifies
// tokens[0 : (i+1)*blockSize]. A trailing partial block has no hash (it cannot be shared).
func BlockHashes(tokens []uint64, blockSize int) []uint64 {
	if blockSize < 1 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]uint64, n)
	h := chainSeed
	for i := 0; i < n; i++ {
		for _, t := range tokens[i*blockSize : (i+1)*blockSize] {
			h = (h ^ t) * 0x100000001b3
		}
		h = mix(h)
		out[i] = h
	}
	return out
}

// mix is the splitmix64 finalizer: it spreads every input bit over the output.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// entry is a cached block. Invariant: ref == 0 exactly when elem is in the pool's LRU list.
type entry struct {
	hash uint64
	ref  int
	elem *list.Element
}

// Pool is the block pool of one engine.
type Pool struct {
	blockSize, total int
	caching          bool

	entries  map[uint64]*entry
	lru      list.List // of *entry with ref 0; front is evicted first
	unhashed int       // blocks held by sequences that have no cache identity (yet)
	pinned   int       // entries with ref > 0

	queries, hits uint64 // prompt tokens looked up and found, since start

	obs Observer // nil: no events
}

// Observer is told when blocks gain or lose their cache identity: the events vLLM publishes with
// --kv-events-config. It is called with the pool's owner's lock held and must not call back.
type Observer interface {
	// Stored reports that hashes, consecutive blocks of one chain, were cached; parent is the
	// chain's block before them (hasParent false when they start the chain).
	Stored(hashes []uint64, parent uint64, hasParent bool)
	// Removed reports that hashes were evicted.
	Removed(hashes []uint64)
	// Cleared reports that every cached block was dropped.
	Cleared()
}

// SetObserver makes o receive the pool's events from now on (nil stops them).
func (p *Pool) SetObserver(o Observer) { p.obs = o }

// New returns a pool of blocks blocks of blockSize tokens; caching false disables prefix caching
// (every block is private to its sequence and forgotten when it ends).
func New(blocks, blockSize int, caching bool) (*Pool, error) {
	if blocks < 1 {
		return nil, fmt.Errorf("kvcache: blocks must be at least 1, got %d", blocks)
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("kvcache: block size must be at least 1, got %d", blockSize)
	}
	return &Pool{blockSize: blockSize, total: blocks, caching: caching, entries: map[uint64]*entry{}}, nil
}

// BlockSize is the number of tokens per block.
func (p *Pool) BlockSize() int { return p.blockSize }

// Blocks is the pool's capacity in blocks.
func (p *Pool) Blocks() int { return p.total }

// Caching reports whether prefix caching is on.
func (p *Pool) Caching() bool { return p.caching }

// BlocksFor is the number of blocks that hold tokens tokens.
func (p *Pool) BlocksFor(tokens int) int { return (tokens + p.blockSize - 1) / p.blockSize }

// Alloc is what one sequence holds: references to cached blocks (a prefix of its hash chain, in
// order) plus blocks without a cache identity.
type Alloc struct {
	hashes   []uint64
	unhashed int
	cached   int // prompt tokens found in the cache at allocation
}

// CachedTokens is the number of prompt tokens the allocation found in the cache.
func (a *Alloc) CachedTokens() int { return a.cached }

// Blocks is the number of blocks the allocation holds.
func (a *Alloc) Blocks() int { return len(a.hashes) + a.unhashed }

// hitBlocks counts the leading hashes of chain that are cached, leaving at least one prompt token
// to compute (the model needs the last token's logits, so a fully cached prompt still recomputes
// its last block).
func (p *Pool) hitBlocks(chain []uint64, promptTokens int) int {
	if !p.caching || promptTokens < 1 {
		return 0
	}
	limit := min(len(chain), (promptTokens-1)/p.blockSize)
	n := 0
	for n < limit {
		if _, ok := p.entries[chain[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// CachedTokens is how many leading tokens of a prompt of promptTokens tokens with full-block
// hashes chain Allocate would find in the cache now. It changes nothing and counts no query.
func (p *Pool) CachedTokens(chain []uint64, promptTokens int) int {
	return p.hitBlocks(chain, promptTokens) * p.blockSize
}

// Allocate reserves room for totalTokens tokens (prompt plus the most it may generate) for a
// prompt of promptTokens tokens whose full-block hashes are chain, reusing the longest cached
// prefix. It returns false, changing nothing, when the free and evictable blocks do not suffice.
// A successful allocation counts the prompt as a prefix-cache query and its cached tokens as hits.
func (p *Pool) Allocate(chain []uint64, promptTokens, totalTokens int) (*Alloc, bool) {
	need := p.BlocksFor(max(totalTokens, promptTokens))
	hit := p.hitBlocks(chain, promptTokens)
	evictable := p.lru.Len()
	for _, h := range chain[:hit] {
		if p.entries[h].ref == 0 {
			evictable-- // pinned by this allocation, so no longer evictable
		}
	}
	fresh := need - hit
	free := p.total - len(p.entries) - p.unhashed
	if free+evictable < fresh {
		return nil, false
	}
	a := &Alloc{hashes: append([]uint64(nil), chain[:hit]...), cached: hit * p.blockSize}
	for _, h := range a.hashes {
		p.ref(p.entries[h])
	}
	for ; free < fresh; free++ {
		p.evict()
	}
	a.unhashed = fresh
	p.unhashed += fresh
	if p.caching {
		p.queries += uint64(promptTokens)
		p.hits += uint64(a.cached)
	}
	return a, true
}

// CanEverFit reports whether totalTokens tokens fit in an empty pool.
func (p *Pool) CanEverFit(totalTokens int) bool { return p.BlocksFor(totalTokens) <= p.total }

func (p *Pool) ref(e *entry) {
	if e.ref == 0 {
		p.lru.Remove(e.elem)
		e.elem = nil
		p.pinned++
	}
	e.ref++
}

func (p *Pool) evict() {
	front := p.lru.Front()
	e := front.Value.(*entry)
	p.lru.Remove(front)
	delete(p.entries, e.hash)
	if p.obs != nil {
		p.obs.Removed([]uint64{e.hash})
	}
}

// Reset drops every cached block, as vLLM's reset_prefix_cache does. Like vLLM, it refuses
// (returns false, changing nothing) while any sequence holds a cached block.
func (p *Pool) Reset() bool {
	if p.pinned > 0 {
		return false
	}
	p.entries = map[uint64]*entry{}
	p.lru.Init()
	if p.obs != nil {
		p.obs.Cleared()
	}
	return true
}

// Commit gives the allocation's computed full blocks their cache identity: chain is the hash
// chain of the tokens computed so far (the prompt after prefill; prompt plus output at the end),
// and must extend the hashes a already holds. A block another sequence cached meanwhile is shared
// and this allocation's duplicate is released.
func (p *Pool) Commit(a *Alloc, chain []uint64) {
	if !p.caching {
		return
	}
	run := -1 // start of the run of newly cached blocks, for the observer
	for i := len(a.hashes); i < len(chain) && a.unhashed > 0; i++ {
		h := chain[i]
		if e, ok := p.entries[h]; ok {
			p.ref(e)
			p.stored(chain, run, i)
			run = -1
		} else {
			p.entries[h] = &entry{hash: h, ref: 1}
			p.pinned++
			if run < 0 {
				run = i
			}
		}
		a.hashes = append(a.hashes, h)
		a.unhashed--
		p.unhashed--
	}
	p.stored(chain, run, len(a.hashes))
}

// stored reports chain[from:to] as newly cached (nothing when from < 0).
func (p *Pool) stored(chain []uint64, from, to int) {
	if p.obs == nil || from < 0 || to <= from {
		return
	}
	var parent uint64
	if from > 0 {
		parent = chain[from-1]
	}
	p.obs.Stored(append([]uint64(nil), chain[from:to]...), parent, from > 0)
}

// Free releases every block of a. Cached blocks stay in the cache; the tail of a sequence is
// queued for eviction before its head, since a later request is likelier to share the head.
func (p *Pool) Free(a *Alloc) {
	for i := len(a.hashes) - 1; i >= 0; i-- {
		e := p.entries[a.hashes[i]]
		e.ref--
		if e.ref == 0 {
			e.elem = p.lru.PushBack(e)
			p.pinned--
		}
	}
	p.unhashed -= a.unhashed
	a.hashes, a.unhashed = nil, 0
}

// Stats is a snapshot of the pool.
type Stats struct {
	// Usage is the fraction of blocks referenced by sequences (0-1), vLLM's kv_cache_usage_perc:
	// cached blocks no sequence holds count as free.
	Usage float64
	// CachedBlocks is the number of blocks with a cache identity (referenced or not).
	CachedBlocks int
	// Queries and Hits are prompt tokens looked up and found in the cache since start.
	Queries, Hits uint64
}

// Stats returns a snapshot.
func (p *Pool) Stats() Stats {
	return Stats{
		Usage:        float64(p.pinned+p.unhashed) / float64(p.total),
		CachedBlocks: len(p.entries),
		Queries:      p.queries,
		Hits:         p.hits,
	}
}
