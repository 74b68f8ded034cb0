package v1alpha1

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// PoolSessionLabel on an AgentSession names the AgentPool (spec.sessions) whose conversation it
// serves; the session's controlling owner is that pool.
const PoolSessionLabel = "session.neuronetes.io/pool"

// Lengths of a pool session's name: PoolSessionPrefixLen characters of the pool's name at most,
// '-', PoolSessionHashLen hex characters; 50 in all, the AgentSession's limit.
const (
	PoolSessionHashLen   = 16
	PoolSessionPrefixLen = 50 - 1 - PoolSessionHashLen
)

// poolSessionDomain separates these hashes from any other.
const poolSessionDomain = "neuronetes/pool-session/v1\x00"

// PoolSessionName is the name of the AgentSession that serves conversation key of pool (the
// gateway's tenant-scoped session key, gateway/sessionkey): the pool's name cut to
// PoolSessionPrefixLen characters without a trailing '-' or '.', then '-' and the first
// PoolSessionHashLen hex characters of SHA-256 over the pool's whole name and the key. The same
// pool and key always give the same name; two pools whose names share the prefix give different
// ones.
func PoolSessionName(pool, key string) string {
	h := sha256.New()
	h.Write([]byte(poolSessionDomain))
	for _, f := range []string{pool, key} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	sum := h.Sum(nil)
	prefix := pool
	if len(prefix) > PoolSessionPrefixLen {
		prefix = prefix[:PoolSessionPrefixLen]
	}
	prefix = strings.TrimRight(prefix, "-.")
	return prefix + "-" + hex.EncodeToString(sum)[:PoolSessionHashLen]
}
