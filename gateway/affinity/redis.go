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
// Every key a script touches is passed in KEYS (Redis Cluster routes by them and ACL key rules
// check them); no script builds a key name.
//
// An activity set is trimmed on every write, not only when counted: entries older than the
// activity window go, and beyond RedisTable.MaxActive sessions the least recent go, so a pod
// whose sessions are never counted still holds a bounded set.
const luaTouch = `
local function touch(act, score, member, cutoff, max, ttl)
  redis.call('ZADD', act, score, member)
  redis.call('ZREMRANGEBYSCORE', act, '-inf', '(' .. cutoff)
  redis.call('ZREMRANGEBYRANK', act, 0, -(max + 1))
  redis.call('PEXPIRE', act, ttl)
end
`

// lookupScript refreshes a pin's TTL and, when the pin is on the pod whose activity set is
// KEYS[2], records the activity in the same round trip. It returns {pod, touched}.
//
//	KEYS: pin, act of the expected pod
//	ARGV: pin TTL ms, expected pod, now ms, key hash, cutoff ms, max, act TTL ms
var lookupScript = redis.NewScript(luaTouch + `
local pod = redis.call('GET', KEYS[1])
if not pod then return false end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if pod ~= ARGV[2] then return {pod, 0} end
touch(KEYS[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7])
return {pod, 1}
`)

// touchScript records activity in the set KEYS[1].
//
//	ARGV: now ms, key hash, cutoff ms, max, act TTL ms
var touchScript = redis.NewScript(luaTouch + `
touch(KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5])
return 1
`)

// pinScript sets a pin and records activity on the new pod; it returns the previous pod ("" when
// none), whose activity the caller removes.
//
//	KEYS: pin, act of the new pod
//	ARGV: pod, pin TTL ms, now ms, key hash, cutoff ms, max, act TTL ms
var pinScript = redis.NewScript(luaTouch + `
local prev = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
touch(KEYS[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7])
if not prev then return '' end
return prev
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

// DefaultMaxActive bounds the sessions held in one pod's activity set.
const DefaultMaxActive = 100_000

// RedisTable is the shared pin table in Redis.
type RedisTable struct {
	c      redis.UniversalClient
	prefix string
	// MaxActive bounds the sessions kept in one pod's activity set (<= 0: DefaultMaxActive);
	// beyond it the least recent are dropped.
	MaxActive int
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

func (r *RedisTable) actKey(pool route.PoolRef, pod string) string { return r.actPrefix(pool) + pod }

func (r *RedisTable) maxActive() int {
	if r.MaxActive > 0 {
		return r.MaxActive
	}
	return DefaultMaxActive
}

// touchArgs are the ARGV tail of luaTouch's callers: now, key hash, cutoff, max, act TTL.
func (r *RedisTable) touchArgs(keyHash string, now time.Time) []any {
	return []any{now.UnixMilli(), keyHash, now.Add(-ActivityWindow).UnixMilli(), r.maxActive(), actTTL.Milliseconds()}
}

// Lookup returns the pinned pod ("" when none), refreshing the TTL and recording activity.
// expect is the pod the caller believes pinned ("" when none): when right, the lookup takes one
// round trip, else a second records the activity.
func (r *RedisTable) Lookup(ctx context.Context, pool route.PoolRef, keyHash string, ttl time.Duration, now time.Time, expect string) (string, error) {
	args := append([]any{ttl.Milliseconds(), expect}, r.touchArgs(keyHash, now)...)
	v, err := lookupScript.Run(ctx, r.c, []string{r.pinKey(pool, keyHash), r.actKey(pool, expect)}, args...).Slice()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("redis pin lookup: %w", err)
	}
	if len(v) != 2 {
		return "", fmt.Errorf("redis pin lookup: unexpected reply %v", v)
	}
	pod, _ := v[0].(string)
	if touched, _ := v[1].(int64); touched == 1 || pod == "" {
		return pod, nil
	}
	if err := touchScript.Run(ctx, r.c, []string{r.actKey(pool, pod)}, r.touchArgs(keyHash, now)...).Err(); err != nil {
		return "", fmt.Errorf("redis activity write: %w", err)
	}
	return pod, nil
}

// Pin sets the pin to pod and moves the session's activity to it.
func (r *RedisTable) Pin(ctx context.Context, pool route.PoolRef, keyHash, pod string, ttl time.Duration, now time.Time) error {
	args := append([]any{pod, ttl.Milliseconds()}, r.touchArgs(keyHash, now)...)
	prev, err := pinScript.Run(ctx, r.c, []string{r.pinKey(pool, keyHash), r.actKey(pool, pod)}, args...).Text()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis pin write: %w", err)
	}
	if prev != "" && prev != pod {
		if err := r.c.ZRem(ctx, r.actKey(pool, prev), keyHash).Err(); err != nil {
			return fmt.Errorf("redis activity move: %w", err)
		}
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
		keys[i] = r.actKey(pool, p)
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
