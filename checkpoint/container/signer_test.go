package container

import (
	"bytes"
	"testing"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// testSigner signs with a fixed test key.
func testSigner(t testing.TB) *store.Signer {
	t.Helper()
	s, err := store.NewSigner(bytes.Repeat([]byte("k"), store.MinKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testKey is agent's key in the tests' namespace.
func testKey(agent string) store.Key { return store.Key{Namespace: "tenant-a", Agent: agent} }
