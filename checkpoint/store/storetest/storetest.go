// Package storetest holds the test fixtures that packages using the checkpoint image store share:
// a signer with a fixed key and keys in one test namespace.
package storetest

import (
	"bytes"
	"testing"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// Namespace is the namespace of Key's keys.
const Namespace = "tenant-a"

// Signer signs with a fixed test key.
func Signer(t testing.TB) *store.Signer {
	t.Helper()
	s, err := store.NewSigner(bytes.Repeat([]byte("k"), store.MinKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Key is agent's key in Namespace.
func Key(agent string) store.Key { return store.Key{Namespace: Namespace, Agent: agent} }
