package store

import "github.com/redis/go-redis/v9"

// Session hash fields: v = version, d = sealed frame, t = TTL in ms.
// KEYS[1] = session key, KEYS[2] = the tenant's version sequence. Both carry
// the tenant hash tag, so they live in one Cluster slot. Versions come from
// the per-tenant sequence, so a deleted and re-created session never reuses a
// version (no ABA for If-Match). Every write publishes "<version> <id>" on the
// tenant's invalidation channel (ARGV[last]) in the same script, so near
// caches learn of it atomically with the write.

// putScript: ARGV = expected version ("" unconditional, "0" create-only),
// frame, ttl ms, id, channel. Returns {1, new} or {0, current}.
var putScript = redis.NewScript(`
if ARGV[1] ~= '' then
  local cur = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
  if tonumber(ARGV[1]) ~= cur then return {0, cur} end
end
local nv = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'v', nv, 'd', ARGV[2], 't', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[5], nv .. ' ' .. ARGV[4])
return {1, nv}
`)

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
