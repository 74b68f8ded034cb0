package store

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Session hash fields: v = version, d = sealed frame, t = TTL in ms.
// KEYS[1] = session key, KEYS[2] = the tenant's version floor (KEYS[3], a
// write's staging hash). All carry the tenant hash tag, so they live in one
// Cluster slot.
//
// Versions are proposed by the writer (versionClock: wall-clock microseconds,
// above every version the writer has seen), so the sealed frame can bind its
// own version before the script runs. A script accepts a proposal only above
// the session's current version and above the floor, the highest version any
// delete of the tenant used: a session's versions only grow, and a deleted
// and re-created session never reuses a version (no ABA for If-Match). A
// proposal at or below either answers {-2, the higher of the two}; the writer
// observes it and proposes again. Versions are passed and stored as the
// writer's decimal strings, never as Lua numbers (whose tostring keeps 14
// digits). Every write publishes "<version> <id>" on the tenant's
// invalidation channel (ARGV[4]) in the same script, so near caches learn of
// it atomically with the write.

// putScript: KEYS[3] = a staging hash holding the new entry's frame (d) and
// TTL (t), written by plain commands in the same pipeline: a frame passed
// through Lua costs Redis about 3 µs per KiB (the script's strings and their
// garbage), so the frame never enters the script, which only moves the
// staging hash into place (RENAME, O(1)). ARGV = expected version (""
// unconditional, "0" create-only), ttl ms, id, channel, proposed version.
// Returns {1, new}, {0, current} on conflict, {-2, floor} for a proposal
// that is not above the current version and the floor (the staging hash is
// dropped in both), or {-1, 0} when the staging hash is gone (its safety TTL
// ran out before the script).
var putScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= cur then
  redis.call('DEL', KEYS[3])
  return {0, cur}
end
if redis.call('EXISTS', KEYS[3]) == 0 then return {-1, 0} end
local floor = math.max(cur, tonumber(redis.call('GET', KEYS[2]) or '0'))
if tonumber(ARGV[5]) <= floor then
  redis.call('DEL', KEYS[3])
  return {-2, floor}
end
redis.call('HSET', KEYS[3], 'v', ARGV[5])
redis.call('RENAME', KEYS[3], KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[4], ARGV[5] .. ' ' .. ARGV[3])
return {1, tonumber(ARGV[5])}
`)

// stagingTTL bounds how long a staging hash outlives a write whose script
// never ran (a connection lost between the two).
const stagingTTL = time.Minute

// delScript: ARGV = expected version ("" unconditional), id, channel,
// proposed tombstone version. Returns {1, tombstone version}, {0, current}
// on conflict, {-1, 0} when missing, or {-2, floor} for a proposal not above
// the current version and the floor. The tombstone version becomes the
// tenant's floor.
var delScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'v')
if not cur then return {-1, 0} end
cur = tonumber(cur)
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= cur then return {0, cur} end
local floor = math.max(cur, tonumber(redis.call('GET', KEYS[2]) or '0'))
if tonumber(ARGV[4]) <= floor then return {-2, floor} end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. ARGV[2])
return {1, tonumber(ARGV[4])}
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
