package quota

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis keys of one scope (one Redis Cluster hash slot):
//
//	<prefix>q:{<scope>}:r   hash {t: level, ts: unix ms} of the request bucket
//	<prefix>q:{<scope>}:t   the same for the token bucket
//	<prefix>q:{<scope>}:c   sorted set: lease id -> expiry (unix ms)
//
// The scripts apply the rules of bucket.go: a bucket starts full, refills at its rate up to its
// burst, and a cost above the burst needs a full bucket and leaves it in debt. Their clock is
// Redis' own (TIME), never a replica's: replicas whose clocks disagree still refill a bucket at
// its rate, and lease expiries are set from durations the caller passes.
//
// ARGV[1] of every script is "" in production; tests set Redis.callerClock to pass the caller's
// now there instead, to step a bucket through time.
const luaNow = `
local function nowms()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

const luaLevel = luaNow + `
local function level(key, rate, burst, now)
  local v = redis.call('HMGET', key, 't', 'ts')
  local t, ts = tonumber(v[1]), tonumber(v[2])
  if t == nil then return burst end
  return math.min(burst, t + math.max(0, now - ts) / 1000 * rate)
end
local function put(key, t, rate, burst, now)
  redis.call('HSET', key, 't', tostring(t), 'ts', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((burst - t) / rate * 1000) + 60000)
end
`

// admitScript ARGV: clock override, request rate, burst, token rate, burst, cost, concurrency limit,
// lease id, lease TTL ms.
var admitScript = redis.NewScript(luaLevel + `
local now = nowms()
local rRate, rBurst = tonumber(ARGV[2]), tonumber(ARGV[3])
local tRate, tBurst = tonumber(ARGV[4]), tonumber(ARGV[5])
local cost, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
if limit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= limit then return {0, 'concurrency', 1000} end
end
local rt, tt
if rRate > 0 then
  rt = level(KEYS[1], rRate, rBurst, now)
  local n = math.min(1, rBurst) - rt
  if n > 0 then return {0, 'requests', math.ceil(n / rRate * 1000)} end
end
if tRate > 0 then
  tt = level(KEYS[2], tRate, tBurst, now)
  local n = math.min(cost, tBurst) - tt
  if n > 0 then return {0, 'tokens', math.ceil(n / tRate * 1000)} end
end
if rRate > 0 then put(KEYS[1], rt - 1, rRate, rBurst, now) end
if tRate > 0 then put(KEYS[2], tt - cost, tRate, tBurst, now) end
if limit > 0 then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[9]), ARGV[8])
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[9]) + 60000)
end
return {1, '', 0}
`)

// settleScript ARGV: clock override, token rate, burst, delta, lease id.
var settleScript = redis.NewScript(luaLevel + `
local now = nowms()
local tRate, tBurst, delta = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if ARGV[5] ~= '' then redis.call('ZREM', KEYS[2], ARGV[5]) end
if tRate > 0 and delta ~= 0 then
  put(KEYS[1], math.min(tBurst, level(KEYS[1], tRate, tBurst, now) + delta), tRate, tBurst, now)
end
return 1
`)

// refreshScript ARGV: clock override, lease TTL ms, lease ids.
var refreshScript = redis.NewScript(luaNow + `
local exp = nowms() + tonumber(ARGV[2])
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then redis.call('ZADD', KEYS[1], exp, ARGV[i]) end
end
return 1
`)

// Redis is a Store shared by every gateway replica.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	// callerClock makes the scripts use the caller's now instead of Redis TIME (tests only).
	callerClock bool
}

// clock is ARGV[1] of the scripts: "" (Redis TIME) unless callerClock.
func (r *Redis) clock(now time.Time) string {
	if r.callerClock {
		return strconv.FormatInt(now.UnixMilli(), 10)
	}
	return ""
}

// NewRedis uses c with key prefix (default "nn:gw:").
func NewRedis(c redis.UniversalClient, prefix string) *Redis {
	if prefix == "" {
		prefix = "nn:gw:"
	}
	return &Redis{c: c, prefix: prefix}
}

func (r *Redis) key(k Keys, kind string) string {
	return r.prefix + "q:{" + k.Scope + "}:" + kind
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Admit implements Store. now is used only to turn leaseExpiry into a TTL: the buckets and the
// lease expiry run on Redis' clock.
func (r *Redis) Admit(ctx context.Context, k Keys, s Spec, cost float64, lease string, leaseExpiry, now time.Time) (Result, error) {
	v, err := admitScript.Run(ctx, r.c, []string{r.key(k, "r"), r.key(k, "t"), r.key(k, "c")},
		r.clock(now), ff(s.ReqRate), ff(s.ReqBurst), ff(s.TokRate), ff(s.TokBurst), ff(cost),
		s.MaxConcurrent, lease, leaseExpiry.Sub(now).Milliseconds()).Slice()
	if err != nil {
		return Result{}, fmt.Errorf("redis quota admit: %w", err)
	}
	if len(v) != 3 {
		return Result{}, fmt.Errorf("redis quota admit: unexpected reply %v", v)
	}
	ok, _ := v[0].(int64)
	reason, _ := v[1].(string)
	ms, _ := v[2].(int64)
	return Result{OK: ok == 1, Reason: reason, Wait: time.Duration(ms) * time.Millisecond}, nil
}

// Settle implements Store, on Redis' clock.
func (r *Redis) Settle(ctx context.Context, k Keys, s Spec, delta float64, lease string, now time.Time) error {
	err := settleScript.Run(ctx, r.c, []string{r.key(k, "t"), r.key(k, "c")},
		r.clock(now), ff(s.TokRate), ff(s.TokBurst), ff(delta), lease).Err()
	if err != nil {
		return fmt.Errorf("redis quota settle: %w", err)
	}
	return nil
}

// Refresh implements Store: the leases expire expiry-time.Now() from Redis' clock.
func (r *Redis) Refresh(ctx context.Context, leases map[Keys][]string, expiry time.Time) error {
	clock, ttl := "", time.Until(expiry).Milliseconds()
	if r.callerClock {
		clock, ttl = r.clock(expiry), 0
	}
	for k, ids := range leases {
		args := make([]any, 0, len(ids)+2)
		args = append(args, clock, ttl)
		for _, id := range ids {
			args = append(args, id)
		}
		if err := refreshScript.Run(ctx, r.c, []string{r.key(k, "c")}, args...).Err(); err != nil {
			return fmt.Errorf("redis quota lease refresh: %w", err)
		}
	}
	return nil
}
