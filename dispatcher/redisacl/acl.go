// Package redisacl holds the Redis ACL rules of the dispatcher's user: the
// key families of dispatcher/dedupe (message records and counters),
// dispatcher/binding (replica heartbeat and health exchange) and
// dispatcher/toolproxy (sealed idempotent answers), all under the
// dispatcher's --redis-prefix, and the commands they send directly or from
// their scripts. The chart renders the same rules into the bundled Redis'
// ACL file; deploy/helm's TestRedisBundledACL compares the two. Redis Streams
// of ToolBindings are not covered: give them a user of their own on their
// broker (queueConfig.url or --redis-queue-url).
package redisacl

import "github.com/neuronetes/neuronetes/internal/redisconn"

// DefaultUser is the dispatcher's user in the chart's bundled Redis.
const DefaultUser = "neuronetes-dispatcher"

// ACLRules returns the rules of the dispatcher's user with key prefix prefix
// (e.g. "nn:dispatch:"): only keys <prefix>*, no channel, and only the
// commands the dispatcher sends. It cannot list keys, flush, configure Redis
// or touch a sidecar's or the gateway's keys.
func ACLRules(prefix string) []string {
	return redisconn.Rules([]string{prefix + "*"},
		// Dedupe and idempotency scripts.
		"+evalsha", "+eval",
		// The scripts' own commands (TIME: lease times from the server clock).
		"+time", "+get", "+set", "+hget", "+hmget", "+hset", "+hincrby", "+hdel", "+pexpire",
		// Counters, health exchange, heartbeat (MULTI/EXEC pipelines), answers.
		"+hgetall", "+del", "+zadd", "+zremrangebyscore", "+zcard", "+multi", "+exec",
	)
}
