package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/internal/lru"
)

// Store keeps each conversation's variant, so it never changes mid-conversation, across every
// gateway replica.
type Store interface {
	// Get returns the stored variant of key and refreshes its TTL; ok is false when none.
	Get(ctx context.Context, key string) (v Variant, ok bool, err error)
	// Assign stores v for key unless a variant is already stored, and returns the stored one
	// (the first writer wins, so replicas agree).
	Assign(ctx context.Context, key string, v Variant) (Variant, error)
}

// DefaultAssignmentTTL is how long an unused assignment is kept (the affinity pins' default).
const DefaultAssignmentTTL = 30 * time.Minute

// MemoryStore is a Store in process memory, for a single replica or static mode. Its entries
// are held in an LRU (internal/lru): every operation is O(1), and beyond the bound the least
// recently used assignment is dropped.
//
// Invariant, under mu: every entry shares one TTL refreshed on each use, so the LRU's order is
// the order of expiry and expired entries are dropped from its back.
type MemoryStore struct {
	TTL time.Duration
	Now func() time.Time

	mu sync.Mutex
	m  *lru.Cache[string, memEntry]
}

type memEntry struct {
	v   Variant
	exp time.Time
}

// NewMemoryStore returns a store holding at most maxEntries assignments (<= 0: unbounded);
// expired ones are dropped as new ones come, and beyond the bound the least recently used.
func NewMemoryStore(ttl time.Duration, maxEntries int) *MemoryStore {
	return &MemoryStore{TTL: ttl, Now: time.Now, m: lru.New[string, memEntry](maxEntries, nil)}
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, key string) (Variant, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	e, ok := s.m.Get(key)
	if !ok || now.After(e.exp) {
		s.m.Remove(key)
		return "", false, nil
	}
	e.exp = now.Add(s.TTL)
	s.m.Put(key, e)
	return e.v, true, nil
}

// Assign implements Store.
func (s *MemoryStore) Assign(_ context.Context, key string, v Variant) (Variant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	if e, ok := s.m.Get(key); ok && !now.After(e.exp) {
		return e.v, nil
	}
	s.m.Put(key, memEntry{v: v, exp: now.Add(s.TTL)})
	for {
		_, e, ok := s.m.Oldest()
		if !ok || !now.After(e.exp) {
			break
		}
		s.m.RemoveOldest()
	}
	return v, nil
}

// Len is the number of assignments held.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Len()
}

// RedisStore is a Store in Redis, shared by every gateway replica.
type RedisStore struct {
	Client redis.UniversalClient
	TTL    time.Duration
	// Prefix of the keys (default "nn:rollout:").
	Prefix string
}

func (s *RedisStore) key(k string) string {
	p := s.Prefix
	if p == "" {
		p = "nn:rollout:"
	}
	return p + k
}

// Get implements Store (GETEX refreshes the TTL in the same round trip).
func (s *RedisStore) Get(ctx context.Context, key string) (Variant, bool, error) {
	v, err := s.Client.GetEx(ctx, s.key(key), s.TTL).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("rollout store get: %w", err)
	}
	return Variant(v), true, nil
}

// Assign implements Store with SET NX GET: one round trip, the first writer wins.
func (s *RedisStore) Assign(ctx context.Context, key string, v Variant) (Variant, error) {
	old, err := s.Client.SetArgs(ctx, s.key(key), string(v), redis.SetArgs{Mode: "NX", Get: true, TTL: s.TTL}).Result()
	if errors.Is(err, redis.Nil) {
		return v, nil
	}
	if err != nil {
		return v, fmt.Errorf("rollout store assign: %w", err)
	}
	return Variant(old), nil
}

// assignmentKey is the store key of a session in a rollout run. It holds no spec generation: a
// pause or an edit that keeps the run keeps the conversation's variant.
func assignmentKey(v *View, session string) string {
	return fmt.Sprintf("%s/%s:%s:%d:%s", v.Namespace, v.Name, v.UID, v.Run, session)
}
