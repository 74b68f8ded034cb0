// Package vector is the sidecar's node-local vector shard: an IVF-Flat index
// (k-means coarse quantizer, exact scoring inside the probed lists) with
// cosine or L2 search, deletes, LRU eviction under a memory budget and
// persistence to a file; plus an embedding cache.
//
// Exact search (Exact) is the reference that recall is measured against.
package vector

import (
	"container/list"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
)

// Errors returned by the index; wrapped, test with errors.Is.
var (
	// ErrDim means a vector's dimension differs from the index's.
	ErrDim = errors.New("dimension mismatch")
	// ErrInvalid means a vector, id or parameter is unacceptable.
	ErrInvalid = errors.New("invalid vector request")
	// ErrNotFound means the id is not in the index.
	ErrNotFound = errors.New("vector not found")
)

// Options configure an Index.
type Options struct {
	// Dim fixes the dimension; 0 takes it from the first insert.
	Dim int
	// MaxBytes is the memory budget; least recently used vectors are evicted
	// beyond it (0: unlimited).
	MaxBytes int64
	// NProbe is the default number of lists searched (0: 16).
	NProbe int
	// MinTrain is the size at which the index first clusters (0: 2048). Below
	// it, and until then, search is exact.
	MinTrain int
	// ListSize is the target mean list length; nlist = n/ListSize, at least
	// sqrt(n) (0: 256).
	ListSize int
	// Seed makes training deterministic.
	Seed uint64
}

// Result is one search hit.
type Result struct {
	ID string `json:"id"`
	// Score is the cosine similarity or the L2 distance.
	Score float32 `json:"score"`
	// Meta is the metadata stored with the vector (shared; do not modify).
	Meta []byte `json:"-"`
}

type ivfList struct {
	ids   []string
	vecs  []float32
	norms []float32
	meta  [][]byte
}

type loc struct{ list, pos int32 }

// Index is an IVF-Flat vector index. It is safe for concurrent use; searches
// run in parallel with each other, writes are exclusive.
//
// Invariants: every id is in exactly one list at loc[id]; len(vecs) ==
// dim*len(ids) for every list; bytes is the sum of entrySize over all
// entries; lru holds every id once, most recently used at the front.
type Index struct {
	opts Options

	mu        sync.RWMutex
	dim       int
	lists     []*ivfList
	centroids []float32 // len(lists)*dim when trained, nil before
	cnorms    []float32 // centroid norms
	cn2       []float32 // squared centroid norms
	locs      map[string]loc
	bytes     int64
	trainedAt int

	lruMu sync.Mutex
	lru   *list.List
	lruEl map[string]*list.Element
}

// New returns an empty index.
func New(o Options) *Index {
	if o.NProbe <= 0 {
		o.NProbe = 16
	}
	if o.MinTrain <= 0 {
		o.MinTrain = 2048
	}
	if o.ListSize <= 0 {
		o.ListSize = 256
	}
	return &Index{opts: o, dim: o.Dim, lists: []*ivfList{{}}, locs: map[string]loc{}, lru: list.New(), lruEl: map[string]*list.Element{}}
}

func (x *Index) entrySize(id string, meta []byte) int64 {
	return int64(x.dim*4+4+len(id)+len(meta)) + 96
}

// Len returns the number of vectors.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.locs)
}

// Bytes returns the accounted memory of the vectors.
func (x *Index) Bytes() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.bytes
}

// Dim returns the dimension (0 while empty and unset).
func (x *Index) Dim() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.dim
}

// Lists returns the number of inverted lists (1 before training).
func (x *Index) Lists() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.lists)
}

func (x *Index) check(v []float32) error {
	if len(v) == 0 {
		return fmt.Errorf("vector: empty: %w", ErrInvalid)
	}
	if x.dim != 0 && len(v) != x.dim {
		return fmt.Errorf("vector: dimension %d, index has %d: %w", len(v), x.dim, ErrDim)
	}
	for i, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return fmt.Errorf("vector[%d]: not finite: %w", i, ErrInvalid)
		}
	}
	return nil
}

// Insert adds or replaces the vector id. It may retrain the index (when the
// size doubled since the last training) and evict least recently used
// vectors to stay within MaxBytes; it returns the evicted ids.
func (x *Index) Insert(id string, v []float32, meta []byte) ([]string, error) {
	if id == "" || len(id) > 512 {
		return nil, fmt.Errorf("id: length %d not in [1,512]: %w", len(id), ErrInvalid)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.check(v); err != nil {
		return nil, err
	}
	if x.dim == 0 {
		x.dim = len(v)
	}
	if _, ok := x.locs[id]; ok {
		x.removeLocked(id)
	}
	x.addLocked(id, v, meta)
	x.touch(id)
	if n := len(x.locs); n >= x.opts.MinTrain && n >= 2*x.trainedAt {
		x.trainLocked()
	}
	var evicted []string
	for x.opts.MaxBytes > 0 && x.bytes > x.opts.MaxBytes && len(x.locs) > 1 {
		victim := x.lruVictim(id)
		if victim == "" {
			break
		}
		x.removeLocked(victim)
		evicted = append(evicted, victim)
	}
	return evicted, nil
}

func (x *Index) addLocked(id string, v []float32, meta []byte) {
	li := 0
	if x.centroids != nil {
		li = x.nearestCentroid(v)
	}
	l := x.lists[li]
	l.ids = append(l.ids, id)
	l.vecs = append(l.vecs, v...)
	l.norms = append(l.norms, norm(v))
	l.meta = append(l.meta, append([]byte(nil), meta...))
	x.locs[id] = loc{int32(li), int32(len(l.ids) - 1)}
	x.bytes += x.entrySize(id, meta)
}

// Delete removes id.
func (x *Index) Delete(id string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.locs[id]; !ok {
		return fmt.Errorf("id %q: %w", id, ErrNotFound)
	}
	x.removeLocked(id)
	return nil
}

// removeLocked swap-removes id from its list, keeping the invariants.
func (x *Index) removeLocked(id string) {
	lc := x.locs[id]
	l := x.lists[lc.list]
	p, last := int(lc.pos), len(l.ids)-1
	x.bytes -= x.entrySize(id, l.meta[p])
	if p != last {
		l.ids[p] = l.ids[last]
		copy(l.vecs[p*x.dim:(p+1)*x.dim], l.vecs[last*x.dim:])
		l.norms[p] = l.norms[last]
		l.meta[p] = l.meta[last]
		x.locs[l.ids[p]] = loc{lc.list, int32(p)}
	}
	l.ids = l.ids[:last]
	l.vecs = l.vecs[:last*x.dim]
	l.norms = l.norms[:last]
	l.meta = l.meta[:last]
	delete(x.locs, id)
	x.lruMu.Lock()
	if el, ok := x.lruEl[id]; ok {
		x.lru.Remove(el)
		delete(x.lruEl, id)
	}
	x.lruMu.Unlock()
}

// touch marks a just-added id as most recently used. Caller holds x.mu.
func (x *Index) touch(id string) {
	x.lruMu.Lock()
	defer x.lruMu.Unlock()
	if el, ok := x.lruEl[id]; ok {
		x.lru.MoveToFront(el)
		return
	}
	x.lruEl[id] = x.lru.PushFront(id)
}

// used marks search hits as recently used. It runs without x.mu, so it
// only moves ids still present (removeLocked drops them under lruMu).
func (x *Index) used(ids []string) {
	x.lruMu.Lock()
	defer x.lruMu.Unlock()
	for _, id := range ids {
		if el, ok := x.lruEl[id]; ok {
			x.lru.MoveToFront(el)
		}
	}
}

func (x *Index) lruVictim(keep string) string {
	x.lruMu.Lock()
	defer x.lruMu.Unlock()
	for el := x.lru.Back(); el != nil; el = el.Prev() {
		if id := el.Value.(string); id != keep {
			return id
		}
	}
	return ""
}

func (x *Index) nearestCentroid(v []float32) int {
	return nearestIn(v, x.centroids, x.cn2, x.dim)
}

// Search returns up to k nearest vectors to q, best first. nprobe <= 0 uses
// the default; nprobe >= the number of lists is an exact search.
func (x *Index) Search(q []float32, k int, m Metric, nprobe int) ([]Result, error) {
	if k <= 0 || k > 10000 {
		return nil, fmt.Errorf("k %d: want 1..10000: %w", k, ErrInvalid)
	}
	x.mu.RLock()
	if err := x.check(q); err != nil {
		x.mu.RUnlock()
		return nil, err
	}
	if nprobe <= 0 {
		nprobe = x.opts.NProbe
	}
	qn2 := dot(q, q)
	qn := float32(math.Sqrt(float64(qn2)))
	probe := x.probeLists(q, qn, qn2, m, nprobe)
	top := newTopK(k)
	for _, li := range probe {
		l := x.lists[li]
		for p := range l.ids {
			s := m.score(dot(q, l.vecs[p*x.dim:(p+1)*x.dim]), qn, qn2, l.norms[p])
			if !top.full() || s < top.h[0].score {
				top.offer(cand{score: s, list: int32(li), pos: int32(p)})
			}
		}
	}
	res := make([]Result, 0, k)
	ids := make([]string, 0, k)
	for _, c := range top.sorted() {
		l := x.lists[c.list]
		res = append(res, Result{ID: l.ids[c.pos], Score: m.public(c.score), Meta: l.meta[c.pos]})
		ids = append(ids, l.ids[c.pos])
	}
	x.mu.RUnlock()
	x.used(ids) // hits are "used" for LRU eviction
	return res, nil
}

func (x *Index) probeLists(q []float32, qn, qn2 float32, m Metric, nprobe int) []int {
	if x.centroids == nil || nprobe >= len(x.lists) {
		all := make([]int, len(x.lists))
		for i := range all {
			all[i] = i
		}
		return all
	}
	top := newTopK(nprobe)
	for c := range len(x.lists) {
		cv := x.centroids[c*x.dim : (c+1)*x.dim]
		top.offer(cand{score: m.score(dot(q, cv), qn, qn2, x.cnorms[c]), list: int32(c)})
	}
	out := make([]int, 0, nprobe)
	for _, c := range top.sorted() {
		out = append(out, int(c.list))
	}
	return out
}

// Exact is the brute-force reference search over every vector.
func (x *Index) Exact(q []float32, k int, m Metric) ([]Result, error) {
	return x.Search(q, k, m, math.MaxInt32)
}

// ids returns all ids, sorted (for tests).
func (x *Index) ids() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.locs))
	for id := range x.locs {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Item is one vector for InsertBatch.
type Item struct {
	ID   string
	Vec  []float32
	Meta []byte
}

// InsertBatch inserts items, training at most once at the end. It is the
// fast path for bulk loads; on error, items before the bad one are kept.
func (x *Index) InsertBatch(items []Item) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, it := range items {
		if it.ID == "" || len(it.ID) > 512 {
			return fmt.Errorf("items[%d].id: length %d not in [1,512]: %w", i, len(it.ID), ErrInvalid)
		}
		if err := x.check(it.Vec); err != nil {
			return fmt.Errorf("items[%d]: %w", i, err)
		}
		if x.dim == 0 {
			x.dim = len(it.Vec)
		}
		if _, ok := x.locs[it.ID]; ok {
			x.removeLocked(it.ID)
		}
		x.addLocked(it.ID, it.Vec, it.Meta)
		x.touch(it.ID)
	}
	if n := len(x.locs); n >= x.opts.MinTrain && n >= 2*x.trainedAt {
		x.trainLocked()
	}
	for x.opts.MaxBytes > 0 && x.bytes > x.opts.MaxBytes && len(x.locs) > 1 {
		victim := x.lruVictim("")
		if victim == "" {
			break
		}
		x.removeLocked(victim)
	}
	return nil
}
