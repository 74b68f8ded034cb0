package store

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Session hash fields: v = version, d = sealed frame, t = TTL in ms.
// KEYS[1] = session key, KEYS[2] = the tenant's version sequence (KEYS[3],
// a write's staging hash). All carry the tenant hash tag, so they live in one
// Cluster slot. Versions come from
// the per-tenant sequence, so a deleted and re-created session never reuses a
// version (no ABA for If-Match). Every write publishes "<version> <id>" on the
// tenant's invalidation channel (ARGV[last]) in the same script, so near
// caches learn of it atomically with the write.

// putScript: KEYS[3] = a staging hash holding the new entry's frame (d) and
// TTL (t), written by plain commands in the same pipeline: a frame passed
// through Lua costs Redis about 3 µs per KiB (the script's strings and their
// garbage), so the frame never enters the script, which only moves the
// staging hash into place (RENAME, O(1)). ARGV = expected version (""
// unconditional, "0" create-only), ttl ms, id, channel. Returns {1, new},
// {0, current} on conflict (the staging hash is dropped), or {-1, 0} when
// the staging hash is gone (its safety TTL ran out before the script).
var putScript = redis.NewScript(`
if ARGV[1] ~= '' then
  local cur = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
  if tonumber(ARGV[1]) ~= cur then
    redis.call('DEL', KEYS[3])
    return {0, cur}
  end
end
if redis.call('EXISTS', KEYS[3]) == 0 then return {-1, 0} end
local nv = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[3], 'v', nv)
redis.call('RENAME', KEYS[3], KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[4], nv .. ' ' .. ARGV[3])
return {1, nv}
`)

// stagingTTL bounds how long a staging hash outlives a write whose script
// never ran (a connection lost between the two).
const stagingTTL = time.Minute

// delScript: ARGV = expected version ("" unconditional), id, channel.
// Returns {1, tombstone version}, {0, current} on conflict, {-1, 0} when missing.
var delScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'v')
if not cur then return {-1, 0} end
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= tonumber(cur) then return {0, tonumber(cur)} end
redis.call('DEL', KEYS[1])
local nv = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', ARGV[3], nv .. ' ' .. ARGV[2])
return {1, nv}
`)

// touchScript resets the TTL of each KEYS[i] to its own stored TTL
// (refresh-on-read, usually batched by the refresher).
var touchScript = redis.NewScript(`
for i, k in ipairs(KEYS) do
  local t = redis.call('HGET', k, 't')
  if t then redis.call('PEXPIRE', k, t) end
end
return 0
`)
