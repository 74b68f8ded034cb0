package store

import "github.com/neuronetes/neuronetes/internal/redisconn"

// ACLRules returns the Redis ACL rules (ACL SETUSER arguments after the user
// name and password) that a tenant's sidecar needs and nothing more: its own
// keys nn:{<tenant>}:* (sessions, version floor, staging hashes, embeddings),
// its own invalidation channel, and only the commands the store sends,
// directly or from its scripts (which run with the caller's rights). A user
// with these rules cannot read or write another tenant's keys, listen on its
// channel, list keys or flush the database. tenant must be ValidTenant.
func ACLRules(tenant string) []string {
	return redisconn.ChannelRules([]string{"nn:{" + tenant + "}:*"}, []string{"nn:{" + tenant + "}:inval"},
		// Reads and TTL refresh.
		"+hmget", "+hget", "+pttl", "+get", "+exists",
		// Writes: the staging hash, blobs, and the scripts' own commands.
		"+hset", "+pexpire", "+set", "+del", "+rename", "+publish",
		// Scripts (EVALSHA, EVAL when Redis lost them, SCRIPT LOAD).
		"+evalsha", "+eval", "+script|load",
		// Near-cache invalidations.
		"+subscribe", "+unsubscribe",
	)
}
