package affinity

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// Redis keys (prefix first, default "nn:gw:"), all of one pool in one Redis Cluster hash slot:
//
//	<prefix>pin:{<ns>/<pool>}:<key hash>   string: the pinned pod, with the pin's TTL
//	<prefix>act:{<ns>/<pool>}:<pod>        sorted set: key hash -> last activity (unix ms)
//
// lookupScript refreshes a pin's TTL and records activity on its pod in one round trip.
var lookupScript = redis.NewScript(`
local pod = redis.call('GET', KEYS[1])
if not pod then return false end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
local act = ARGV[4] .. pod
redis.call('ZADD', act, ARGV[2], ARGV[3])
redis.call('PEXPIRE', act, ARGV[5])
return pod
`)

// pinScript sets a pin, records activity on the new pod and removes it from the previous one.
var pinScript = redis.NewScript(`
local prev = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local act = ARGV[5] .. ARGV[1]
redis.call('ZADD', act, ARGV[3], ARGV[4])
redis.call('PEXPIRE', act, ARGV[6])
if prev and prev ~= ARGV[1] then redis.call('ZREM', ARGV[5] .. prev, ARGV[4]) end
return 1
`)

// activeScript drops activity older than ARGV[1] and counts the rest, per pod key given.
var activeScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, '-inf', '(' .. ARGV[1])
  out[i] = redis.call('ZCARD', k)
end
return out
`)

// RedisTable is the shared pin table in Redis.
type RedisTable struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedisTable uses c with key prefix (default "nn:gw:").
func NewRedisTable(c redis.UniversalClient, prefix string) *RedisTable {
	if prefix == "" {
		prefix = "nn:gw:"
	}
	return &RedisTable{c: c, prefix: prefix}
}

func (r *RedisTable) pinKey(pool route.PoolRef, keyHash string) string {
	return r.prefix + "pin:{" + pool.String() + "}:" + keyHash
}

func (r *RedisTable) actPrefix(pool route.PoolRef) string {
	return r.prefix + "act:{" + pool.String() + "}:"
}

// actTTL keeps an idle activity set a little longer than the activity window.
const actTTL = 2 * ActivityWindow

// Lookup returns the pinned pod ("" when none), refreshing the TTL and recording activity.
func (r *RedisTable) Lookup(ctx context.Context, pool route.PoolRef, keyHash string, ttl time.Duration, now time.Time) (string, error) {
	v, err := lookupScript.Run(ctx, r.c, []string{r.pinKey(pool, keyHash)},
		ttl.Milliseconds(), now.UnixMilli(), keyHash, r.actPrefix(pool), actTTL.Milliseconds()).Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("redis pin lookup: %w", err)
	}
	return v, nil
}

// Pin sets the pin to pod and moves the session's activity to it.
func (r *RedisTable) Pin(ctx context.Context, pool route.PoolRef, keyHash, pod string, ttl time.Duration, now time.Time) error {
	err := pinScript.Run(ctx, r.c, []string{r.pinKey(pool, keyHash)},
		pod, ttl.Milliseconds(), now.UnixMilli(), keyHash, r.actPrefix(pool), actTTL.Milliseconds()).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis pin write: %w", err)
	}
	return nil
}

// Active counts the sessions active since now-ActivityWindow on each of pods.
func (r *RedisTable) Active(ctx context.Context, pool route.PoolRef, pods []string, now time.Time) (map[string]int, error) {
	out := make(map[string]int, len(pods))
	if len(pods) == 0 {
		return out, nil
	}
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = r.actPrefix(pool) + p
	}
	vals, err := activeScript.Run(ctx, r.c, keys, strconv.FormatInt(now.Add(-ActivityWindow).UnixMilli(), 10)).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redis active sessions: %w", err)
	}
	for i, p := range pods {
		if i < len(vals) {
			out[p] = int(vals[i])
		}
	}
	return out, nil
}

// Ping checks the connection.
func (r *RedisTable) Ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}
