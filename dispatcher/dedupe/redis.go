package dedupe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Store on Redis: one hash per message under
// <prefix>msg:{<binding>}:<id> (one Redis Cluster slot per binding), counters under
// <prefix>stats:{<binding>}. Lease times come from the Redis server's clock (TIME), so replicas
// with skewed clocks agree.
type Redis struct {
	client redis.UniversalClient
	prefix string
}

// NewRedis returns a store on c with key prefix prefix (e.g. "nn:dispatch:").
func NewRedis(c redis.UniversalClient, prefix string) *Redis {
	return &Redis{client: c, prefix: prefix}
}

func (r *Redis) key(binding, id string) string {
	return r.prefix + "msg:{" + binding + "}:" + id
}

// The scripts share a prelude that reads the server clock in milliseconds into nowms.
const prelude = `local t = redis.call('TIME'); local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// fenced is the check every fenced script starts with: the caller must own a live lease.
const fenced = prelude + `if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] or tonumber(redis.call('HGET', KEYS[1], 'lease') or '0') < nowms then return redis.error_reply('LEASE lease lost') end
`

var beginScript = redis.NewScript(prelude + `
local st = redis.call('HGET', KEYS[1], 'state')
if st == 'done' or st == 'dead' then return {st} end
local owner = redis.call('HGET', KEYS[1], 'owner')
local lease = tonumber(redis.call('HGET', KEYS[1], 'lease') or '0')
if owner and owner ~= ARGV[1] and lease > nowms then return {'busy', tostring(lease - nowms)} end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease', tostring(nowms + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local h = redis.call('HMGET', KEYS[1], 'failures', 'starts', 'err', 'outcome', 'meta', 'saved')
if st == 'result' or st == 'dead-pending' then
  return {st, h[1] or '0', h[2] or '0', h[3] or '', h[4] or '', h[5] or '', h[6] or '0'}
end
redis.call('HSET', KEYS[1], 'state', 'processing')
return {'acquired', h[1] or '0', h[2] or '0', h[3] or ''}
`)

var startScript = redis.NewScript(fenced + `return redis.call('HINCRBY', KEYS[1], 'starts', 1)`)

var renewScript = redis.NewScript(fenced + `redis.call('HSET', KEYS[1], 'lease', tostring(nowms + tonumber(ARGV[2]))) return 1`)

var failScript = redis.NewScript(fenced + `redis.call('HSET', KEYS[1], 'err', ARGV[2]) return redis.call('HINCRBY', KEYS[1], 'failures', 1)`)

var saveScript = redis.NewScript(fenced + `redis.call('HSET', KEYS[1], 'state', ARGV[2], 'outcome', ARGV[3], 'meta', ARGV[4], 'saved', tostring(nowms)) return 1`)

var finishScript = redis.NewScript(fenced + `
redis.call('HDEL', KEYS[1], 'outcome', 'meta', 'owner', 'lease')
redis.call('HSET', KEYS[1], 'state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)

var releaseScript = redis.NewScript(`if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then redis.call('HDEL', KEYS[1], 'owner', 'lease') end return 1`)

// Begin implements Store.
func (r *Redis) Begin(ctx context.Context, binding, id, owner string, lease, ttl time.Duration) (Record, error) {
	v, err := beginScript.Run(ctx, r.client, []string{r.key(binding, id)}, owner, lease.Milliseconds(), max(ttl, lease).Milliseconds()).Slice()
	if err != nil {
		return Record{}, fmt.Errorf("dedupe begin %s %s: %w", binding, id, err)
	}
	s := func(i int) string {
		if i < len(v) {
			if x, ok := v[i].(string); ok {
				return x
			}
		}
		return ""
	}
	n := func(i int) int { x, _ := strconv.Atoi(s(i)); return x }
	rec := Record{State: State(s(0))}
	switch rec.State {
	case Done, Dead:
	case Busy:
		rec.Wait = time.Duration(n(1)) * time.Millisecond
	case Result, DeadPending:
		rec.Failures, rec.Starts, rec.LastError = n(1), n(2), s(3)
		rec.Outcome, rec.Meta = []byte(s(4)), []byte(s(5))
		rec.Saved = time.UnixMilli(int64(n(6)))
	case Acquired:
		rec.Failures, rec.Starts, rec.LastError = n(1), n(2), s(3)
	default:
		return Record{}, fmt.Errorf("dedupe begin %s %s: unexpected state %q", binding, id, rec.State)
	}
	return rec, nil
}

func (r *Redis) fencedRun(ctx context.Context, s *redis.Script, what, binding, id string, args ...any) (any, error) {
	v, err := s.Run(ctx, r.client, []string{r.key(binding, id)}, args...).Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "LEASE") || strings.HasPrefix(err.Error(), "ERR LEASE") {
			return nil, fmt.Errorf("dedupe %s %s %s: %w", what, binding, id, ErrLeaseLost)
		}
		return nil, fmt.Errorf("dedupe %s %s %s: %w", what, binding, id, err)
	}
	return v, nil
}

// StartAttempt implements Store.
func (r *Redis) StartAttempt(ctx context.Context, binding, id, owner string) (int, error) {
	v, err := r.fencedRun(ctx, startScript, "start", binding, id, owner)
	if err != nil {
		return 0, err
	}
	n, _ := v.(int64)
	return int(n), nil
}

// Renew implements Store.
func (r *Redis) Renew(ctx context.Context, binding, id, owner string, lease time.Duration) error {
	_, err := r.fencedRun(ctx, renewScript, "renew", binding, id, owner, lease.Milliseconds())
	return err
}

// Fail implements Store.
func (r *Redis) Fail(ctx context.Context, binding, id, owner, msg string) (int, error) {
	v, err := r.fencedRun(ctx, failScript, "fail", binding, id, owner, msg)
	if err != nil {
		return 0, err
	}
	n, _ := v.(int64)
	return int(n), nil
}

// SaveOutcome implements Store.
func (r *Redis) SaveOutcome(ctx context.Context, binding, id, owner string, state State, outcome, meta []byte) error {
	if state != Result && state != DeadPending {
		return fmt.Errorf("dedupe save %s %s: state %q is not an outcome", binding, id, state)
	}
	_, err := r.fencedRun(ctx, saveScript, "save", binding, id, owner, string(state), outcome, meta)
	return err
}

// Finish implements Store.
func (r *Redis) Finish(ctx context.Context, binding, id, owner string, state State, ttl time.Duration) error {
	if state != Done && state != Dead {
		return fmt.Errorf("dedupe finish %s %s: state %q is not final", binding, id, state)
	}
	_, err := r.fencedRun(ctx, finishScript, "finish", binding, id, owner, string(state), ttl.Milliseconds())
	return err
}

// Release implements Store.
func (r *Redis) Release(ctx context.Context, binding, id, owner string) error {
	if err := releaseScript.Run(ctx, r.client, []string{r.key(binding, id)}, owner).Err(); err != nil {
		return fmt.Errorf("dedupe release %s %s: %w", binding, id, err)
	}
	return nil
}

// Count implements Store.
func (r *Redis) Count(ctx context.Context, binding string, deltas map[string]int64) error {
	p := r.client.Pipeline()
	k := r.prefix + "stats:{" + binding + "}"
	for f, d := range deltas {
		if d != 0 {
			p.HIncrBy(ctx, k, f, d)
		}
	}
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("dedupe count %s: %w", binding, err)
	}
	return nil
}

// Counters implements Store.
func (r *Redis) Counters(ctx context.Context, binding string) (map[string]int64, error) {
	m, err := r.client.HGetAll(ctx, r.prefix+"stats:{"+binding+"}").Result()
	if err != nil {
		return nil, fmt.Errorf("dedupe counters %s: %w", binding, err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, _ := strconv.ParseInt(v, 10, 64)
		out[k] = n
	}
	return out, nil
}
