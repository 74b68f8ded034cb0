package store

import (
	"bytes"
	"context"
	"testing"
)

// testNS is the namespace the tests store under unless they say otherwise.
const testNS = "tenant-a"

// key is agent's Key in testNS.
func key(agent string) Key { return Key{Namespace: testNS, Agent: agent} }

// testSigner signs with a fixed test key.
func testSigner(t testing.TB) *Signer {
	t.Helper()
	s, err := NewSigner(bytes.Repeat([]byte("k"), MinKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rewriteManifest stores m as its checkpoint's manifest, signed with the store's key (what
// a node agent holding the key could write).
func rewriteManifest(ctx context.Context, s *Store, m *Manifest) error {
	b, err := s.signer.seal(m)
	if err != nil {
		return err
	}
	return s.b.Put(ctx, manifestKey(m.Key, m.ID), bytes.NewReader(b), int64(len(b)))
}

// mustChunkKey is chunkKey for a known-good sum.
func mustChunkKey(t testing.TB, ns, sum string, c Compression) string {
	t.Helper()
	k, err := chunkKey(ns, sum, c)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
