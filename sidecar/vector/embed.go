package vector

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Remote is an optional second tier for the embedding cache (Redis, sealed).
type Remote interface {
	// GetBlob returns the blob stored under id, or an error wrapping a
	// not-found error the caller treats as a miss (see IsMiss).
	GetBlob(ctx context.Context, id string) ([]byte, error)
	// PutBlob stores b under id with a TTL.
	PutBlob(ctx context.Context, id string, b []byte, ttl time.Duration) error
	// IsMiss reports whether err from GetBlob means "not stored".
	IsMiss(err error) bool
}

// ErrMiss means the embedding is not cached.
var ErrMiss = errors.New("embedding not cached")

// EmbeddingCache maps (model, text) to a vector: a local LRU bounded in
// bytes, backed by an optional Remote. Safe for concurrent use.
type EmbeddingCache struct {
	remote    Remote
	remoteTTL time.Duration

	mu     sync.Mutex
	budget int
	used   int
	ll     *list.List
	items  map[string]*list.Element
}

type embEntry struct {
	key string
	vec []float32
}

// NewEmbeddingCache returns a cache with a local budget in bytes; remote may be nil.
func NewEmbeddingCache(budget int, remote Remote, remoteTTL time.Duration) *EmbeddingCache {
	return &EmbeddingCache{remote: remote, remoteTTL: remoteTTL, budget: budget, ll: list.New(), items: map[string]*list.Element{}}
}

// Key returns the cache key of (model, text): the hex SHA-256 of model, a NUL and text.
func Key(model, text string) string {
	h := sha256.New()
	h.Write([]byte(model))
	h.Write([]byte{0})
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}

// Source says which tier answered a lookup.
type Source string

// Lookup sources.
const (
	SourceLocal  Source = "local"
	SourceRemote Source = "remote"
)

// Get returns the cached vector for key (see Key) and which tier had it.
// Remote hits are copied into the local tier. A miss is ErrMiss.
func (c *EmbeddingCache) Get(ctx context.Context, key string) ([]float32, Source, error) {
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		v := el.Value.(*embEntry).vec
		c.mu.Unlock()
		return v, SourceLocal, nil
	}
	c.mu.Unlock()
	if c.remote == nil {
		return nil, "", ErrMiss
	}
	b, err := c.remote.GetBlob(ctx, key)
	if err != nil {
		if c.remote.IsMiss(err) {
			return nil, "", ErrMiss
		}
		return nil, "", fmt.Errorf("embedding %s: %w", key, err)
	}
	v, err := decodeVec(b)
	if err != nil {
		return nil, "", fmt.Errorf("embedding %s: %w", key, err)
	}
	c.putLocal(key, v)
	return v, SourceRemote, nil
}

// Put stores v under key locally and, when configured, remotely.
func (c *EmbeddingCache) Put(ctx context.Context, key string, v []float32) error {
	if len(v) == 0 {
		return fmt.Errorf("vector: empty: %w", ErrInvalid)
	}
	for i, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return fmt.Errorf("vector[%d]: not finite: %w", i, ErrInvalid)
		}
	}
	v = append([]float32(nil), v...)
	c.putLocal(key, v)
	if c.remote != nil {
		if err := c.remote.PutBlob(ctx, key, encodeVec(v), c.remoteTTL); err != nil {
			return fmt.Errorf("embedding %s: remote: %w", key, err)
		}
	}
	return nil
}

// Len returns the number of locally cached embeddings.
func (c *EmbeddingCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

func (c *EmbeddingCache) putLocal(key string, v []float32) {
	size := len(key) + 4*len(v) + 80
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.budget {
		return
	}
	if el, ok := c.items[key]; ok {
		c.used -= len(key) + 4*len(el.Value.(*embEntry).vec) + 80
		c.ll.Remove(el)
	}
	c.items[key] = c.ll.PushFront(&embEntry{key: key, vec: v})
	c.used += size
	for c.used > c.budget {
		el := c.ll.Back()
		e := el.Value.(*embEntry)
		c.ll.Remove(el)
		delete(c.items, e.key)
		c.used -= len(e.key) + 4*len(e.vec) + 80
	}
}

func encodeVec(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

func decodeVec(b []byte) ([]float32, error) {
	if len(b) == 0 || len(b)%4 != 0 {
		return nil, fmt.Errorf("stored vector: %d bytes: %w", len(b), ErrCorrupt)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}
