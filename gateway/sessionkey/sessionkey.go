// Package sessionkey scopes session keys by tenant: the one place where the key a client sent
// (a conversation id, a user id) becomes the key the gateway routes, pins, assigns rollout
// variants and counts activity by, and the conversation id the agent pod receives.
//
// A scoped key is HMAC-SHA256(secret, tenant key, client key), hex, truncated to 128 bits. It is
// opaque: tenant B sending tenant A's conversation id gets another key (another pin, another
// rollout assignment, another session memory in the pod's sidecar), and no raw user id is stored
// in Redis or sent to the pod. Every gateway replica must hold the same secret, or replicas
// disagree on pins and agents on session memory.
package sessionkey

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"strings"
	"sync"

	"github.com/neuronetes/neuronetes/gateway/access"
)

// MinSecretBytes is the shortest secret accepted.
const MinSecretBytes = 32

// domain separates these hashes from any other use of the secret.
const domain = "neuronetes/session-key/v1\x00"

// Scoper derives scoped session keys. Its methods are safe for concurrent use.
type Scoper struct {
	pool sync.Pool // hash.Hash keyed with the secret
}

// New returns a Scoper keyed with secret (at least MinSecretBytes bytes).
func New(secret []byte) (*Scoper, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("session key secret has %d bytes, at least %d are required", len(secret), MinSecretBytes)
	}
	key := append([]byte(nil), secret...)
	s := &Scoper{}
	s.pool.New = func() any { return hmac.New(sha256.New, key) }
	return s, nil
}

// Load reads the secret from path (surrounding whitespace is not part of it).
func Load(path string) (*Scoper, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read session key secret: %w", err)
	}
	s, err := New([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Random returns a Scoper with a secret of this process only: scoped keys change when the
// process restarts and differ between replicas.
func Random() *Scoper {
	b := make([]byte, MinSecretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	s, _ := New(b)
	return s
}

// Scope returns the tenant's scoped form of the client's session key; "" for "".
func (s *Scoper) Scope(t *access.Tenant, key string) string {
	if key == "" {
		return ""
	}
	h := s.pool.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(domain))
	writeField(h, t.Key())
	writeField(h, key)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	s.pool.Put(h)
	return hex.EncodeToString(out[:16])
}

// writeField writes a length-prefixed field, so that no two (tenant, key) pairs hash the same
// input.
func writeField(h hash.Hash, v string) {
	var n [4]byte
	l := len(v)
	n[0], n[1], n[2], n[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
	h.Write(n[:])
	h.Write([]byte(v))
}
