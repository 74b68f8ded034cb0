// Package redisusers keeps the Redis ACL users of the namespaces whose agent
// pods get the sidecar: for each such namespace a Secret (username, password)
// that the webhook injects into the sidecars, and a Redis user of the same
// name and password limited to that namespace's keys (store.ACLRules). It
// re-applies the users after a Redis restart and removes those of namespaces
// that no longer have an AgentPool.
//
// Invariants: the controller only writes Secrets named SecretName that carry
// nnv1.ManagedByLabel (a Secret of that name without it is the admin's and left
// alone), the ACL user of a namespace is always UserName(namespace) whatever
// the Secret says, and it only deletes Redis users named UserPrefix*.
package redisusers

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/neuronetes/neuronetes/internal/redisconn"
)

const (
	// DefaultUser is the controller's user in the chart's bundled Redis.
	DefaultUser = "neuronetes-controller"
	// UserPrefix starts every namespace user's name; namespace names cannot hold ':', so no
	// namespace user can take a component's name.
	UserPrefix = "sidecar:"
	// UsernameKey and PasswordKey are the Secret's keys (the webhook's env references).
	UsernameKey, PasswordKey = "username", "password"
	// minPasswordLen is the shortest password the controller keeps from an existing Secret.
	minPasswordLen = 32
)

// UserName is the Redis user of namespace ns's sidecars.
func UserName(ns string) string { return UserPrefix + ns }

// ACLRules returns the rules of the controller's own user: no key, no
// channel, and only ACL SETUSER, ACL DELUSER and ACL USERS. A user who may
// run ACL SETUSER can grant any user any right, itself included, so its
// password is as sensitive as Redis' admin password; it reads no data.
func ACLRules() []string {
	return redisconn.Rules(nil, "+acl|setuser", "+acl|deluser", "+acl|users")
}

// newPassword returns 32 random bytes, hex-encoded.
func newPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
