package toolproxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Answer is a stored tool answer.
type Answer struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	Body        []byte `json:"body"`
	// Args is the SHA-256 of the arguments of the first call.
	Args string `json:"args"`
}

// Idempotency outcomes of Claim.
var (
	// ErrInProgress: a call with the key is running.
	ErrInProgress = errors.New("a call with this Idempotency-Key is in progress")
	// ErrKeyReused: the key was used with other arguments.
	ErrKeyReused = errors.New("this Idempotency-Key was used with different arguments")
)

// IdemStore keeps idempotency keys of side-effecting calls.
type IdemStore interface {
	// Claim reserves key for a call with args; it returns a stored answer to replay instead,
	// ErrInProgress or ErrKeyReused.
	Claim(ctx context.Context, key, args string, ttl time.Duration) (*Answer, error)
	// Store records the answer of the claimed key.
	Store(ctx context.Context, key string, a Answer, ttl time.Duration) error
	// Abandon frees the claim (the call failed before the tool could act, or may be retried).
	Abandon(ctx context.Context, key string) error
}

// IdemKey scopes a caller's key to the tool and the calling pool.
func IdemKey(ns, tool, pool, key string) string {
	h := sha256.Sum256([]byte(pool + "\x00" + key))
	return "{" + ns + "/" + tool + "}:" + hex.EncodeToString(h[:16])
}

// ArgsDigest fingerprints arguments.
func ArgsDigest(args []byte) string {
	h := sha256.Sum256(args)
	return hex.EncodeToString(h[:])
}

// RedisIdem is the IdemStore on Redis (shared by the replicas). Answers are
// stored sealed and argument fingerprints keyed by Sealer: Redis holds no
// tool answer or argument digest in plain text, and a value written to Redis
// by anyone without the key is never replayed (ErrAnswerUnreadable).
type RedisIdem struct {
	Client redis.UniversalClient
	Prefix string
	// Sealer seals answers; every replica needs the same key (required).
	Sealer *IdemSealer
}

func (r *RedisIdem) key(key string) string { return r.Prefix + "idem:" + key }

var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then redis.call('SET', KEYS[1], 'pending:' .. ARGV[1], 'PX', ARGV[2]) return {'claimed'} end
if string.sub(v, 1, 8) == 'pending:' then
  if string.sub(v, 9) ~= ARGV[1] then return {'reused'} end
  return {'pending'}
end
return {'done', v}`)

// Claim implements IdemStore.
func (r *RedisIdem) Claim(ctx context.Context, key, args string, ttl time.Duration) (*Answer, error) {
	if r.Sealer == nil {
		return nil, errors.New("idempotency store: no sealing key")
	}
	rkey := r.key(key)
	v, err := claimScript.Run(ctx, r.Client, []string{rkey}, r.Sealer.argsTag(rkey, args), ttl.Milliseconds()).Slice()
	if err != nil {
		return nil, fmt.Errorf("idempotency store: %w", err)
	}
	switch v[0] {
	case "claimed":
		return nil, nil
	case "pending":
		return nil, ErrInProgress
	case "reused":
		return nil, ErrKeyReused
	}
	stored, _ := v[1].(string)
	plain, err := r.Sealer.open(rkey, []byte(stored))
	if err != nil {
		return nil, fmt.Errorf("idempotency store: %w", err)
	}
	var a Answer
	if err := json.Unmarshal(plain, &a); err != nil {
		return nil, fmt.Errorf("idempotency store: stored answer: %w", err)
	}
	if a.Args != args {
		return nil, ErrKeyReused
	}
	return &a, nil
}

// Store implements IdemStore.
func (r *RedisIdem) Store(ctx context.Context, key string, a Answer, ttl time.Duration) error {
	if r.Sealer == nil {
		return errors.New("idempotency store: no sealing key")
	}
	b, _ := json.Marshal(a)
	sealed, err := r.Sealer.seal(r.key(key), b)
	if err != nil {
		return fmt.Errorf("idempotency store: %w", err)
	}
	if err := r.Client.Set(ctx, r.key(key), sealed, ttl).Err(); err != nil {
		return fmt.Errorf("idempotency store: %w", err)
	}
	return nil
}

// Abandon implements IdemStore.
func (r *RedisIdem) Abandon(ctx context.Context, key string) error {
	return r.Client.Del(ctx, r.key(key)).Err()
}

// MemoryIdem is an in-process IdemStore (tests, single replica).
type MemoryIdem struct {
	mu sync.Mutex
	m  map[string]*Answer // nil value: pending
	a  map[string]string  // args of pending claims
}

// Claim implements IdemStore.
func (m *MemoryIdem) Claim(_ context.Context, key, args string, _ time.Duration) (*Answer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m, m.a = map[string]*Answer{}, map[string]string{}
	}
	a, ok := m.m[key]
	switch {
	case !ok:
		m.m[key], m.a[key] = nil, args
		return nil, nil
	case a == nil && m.a[key] != args:
		return nil, ErrKeyReused
	case a == nil:
		return nil, ErrInProgress
	case a.Args != args:
		return nil, ErrKeyReused
	}
	return a, nil
}

// Store implements IdemStore.
func (m *MemoryIdem) Store(_ context.Context, key string, a Answer, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[key] = &a
	return nil
}

// Abandon implements IdemStore.
func (m *MemoryIdem) Abandon(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
	return nil
}
