// Package redisacl holds the Redis ACL rules of the gateway's user: the key
// families of gateway/affinity (pins and session activity), gateway/quota
// (token buckets, concurrency leases and the replicas' announcements) and
// gateway/rollout (variant assignments), all under the gateway's --redis-prefix, and the commands
// those stores send directly or from their scripts (scripts run with the
// caller's rights). The chart renders the same rules into the bundled Redis'
// ACL file; deploy/helm's TestRedisBundledACL compares the two.
package redisacl

import "github.com/neuronetes/neuronetes/internal/redisconn"

// DefaultUser is the gateway's user in the chart's bundled Redis.
const DefaultUser = "neuronetes-gateway"

// RolloutPrefix is the key prefix of rollout assignments under the gateway's
// prefix (<prefix>rollout:<run>:<session>).
const RolloutPrefix = "rollout:"

// ACLRules returns the rules of the gateway's user with key prefix prefix
// (e.g. "nn:gw:"): only keys <prefix>*, no channel, and only the commands
// the gateway sends. It cannot list keys, flush, configure Redis or touch a
// sidecar's or the dispatcher's keys.
func ACLRules(prefix string) []string {
	return redisconn.Rules([]string{prefix + "*"},
		// Affinity and quota scripts (EVALSHA, then EVAL when Redis lost them).
		"+evalsha", "+eval",
		// The scripts' own commands (TIME: the quota scripts' clock).
		"+time", "+get", "+set", "+pexpire", "+zadd", "+zrem", "+zremrangebyscore", "+zremrangebyrank", "+zcard", "+zscore",
		"+hmget", "+hset",
		// Rollout assignments: GETEX and SET NX GET.
		"+getex",
	)
}
