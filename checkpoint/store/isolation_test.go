package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// putSmall stores a small image under k/id and returns its manifest.
func putSmall(t *testing.T, s *Store, k Key, id string, seed uint64) *Manifest {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "pages-1.img"), randBytes(256<<10, seed), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := s.Put(context.Background(), k, id, src, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestNamespacesIsolated: the same agent name in two namespaces names two disjoint groups:
// neither sees, restores, dedups against or prunes the other's checkpoints.
func TestNamespacesIsolated(t *testing.T) {
	ctx := context.Background()
	s, _ := newDirStore(t, CompressionNone)
	victim, attacker := Key{Namespace: "tenant-b", Agent: "chat"}, Key{Namespace: "tenant-a", Agent: "chat"}
	vm := putSmall(t, s, victim, "tenant-b.ck", 1)

	// The attacker publishes the same bytes and a newer checkpoint under the same agent name.
	am := putSmall(t, s, attacker, "tenant-a.ck", 1)
	if am.NewBytes != am.TotalBytes {
		t.Errorf("attacker's identical image stored %d new of %d bytes: chunks are shared across namespaces (dedup leaks)", am.NewBytes, am.TotalBytes)
	}
	latest, err := s.Latest(ctx, victim)
	if err != nil || latest.ID != vm.ID {
		t.Errorf("victim's latest = %v, %v; want %s", latest, err, vm.ID)
	}
	if _, err := s.Get(ctx, attacker, vm.ID, t.TempDir(), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("attacker restoring the victim's id: %v, want ErrNotFound", err)
	}
	ChunkGraceSave := ChunkGrace
	ChunkGrace = 0
	t.Cleanup(func() { ChunkGrace = ChunkGraceSave })
	putSmall(t, s, attacker, "tenant-a.ck2", 2)
	if _, err := s.Prune(ctx, attacker, Retention{KeepLast: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, victim, vm.ID, t.TempDir(), nil); err != nil {
		t.Errorf("victim's checkpoint after the attacker's prune: %v", err)
	}
}

// TestManifestRefusedBeforeUse: every manifest that was not written by a key holder for
// exactly this namespace/agent/id, or that holds a malformed hash, is refused by Get, List
// and Prune with a typed error, before any chunk is read (and without panicking).
func TestManifestRefusedBeforeUse(t *testing.T) {
	ctx := context.Background()
	other, err := NewSigner(bytes.Repeat([]byte("x"), MinKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		tamper func(t *testing.T, s *Store, m *Manifest) // rewrites the stored manifest of m
		want   error
	}{
		{"payload edited", func(t *testing.T, s *Store, m *Manifest) {
			raw := readRaw(t, s, manifestKey(m.Key, m.ID))
			raw = bytes.Replace(raw, []byte(`"totalBytes":`), []byte(`"totalBytes":1`), 1)
			writeRaw(t, s, manifestKey(m.Key, m.ID), raw)
		}, ErrBadSignature},
		{"signed with another key", func(t *testing.T, s *Store, m *Manifest) {
			b, err := other.seal(m)
			if err != nil {
				t.Fatal(err)
			}
			writeRaw(t, s, manifestKey(m.Key, m.ID), b)
		}, ErrBadSignature},
		{"signature stripped", func(t *testing.T, s *Store, m *Manifest) {
			raw := readRaw(t, s, manifestKey(m.Key, m.ID))
			var env envelope
			if err := json.Unmarshal(raw, &env); err != nil {
				t.Fatal(err)
			}
			env.HMACSHA256 = ""
			b, _ := json.Marshal(env)
			writeRaw(t, s, manifestKey(m.Key, m.ID), b)
		}, ErrBadSignature},
		{"foreign namespace's manifest copied in", func(t *testing.T, s *Store, m *Manifest) {
			foreign := *m
			foreign.Namespace = "tenant-b"
			b, err := s.signer.seal(&foreign)
			if err != nil {
				t.Fatal(err)
			}
			writeRaw(t, s, manifestKey(m.Key, m.ID), b)
		}, ErrCorrupt},
		{"another id's manifest copied in", func(t *testing.T, s *Store, m *Manifest) {
			m2 := *m
			m2.ID = "renamed"
			writeRaw(t, s, manifestKey(m.Key, m.ID), must(s.signer.seal(&m2)))
		}, ErrCorrupt},
		{"one-character chunk hash", func(t *testing.T, s *Store, m *Manifest) {
			m.Files[0].Chunks[0].SHA256 = "a"
			writeRaw(t, s, manifestKey(m.Key, m.ID), must(s.signer.seal(m)))
		}, ErrCorrupt},
		{"uppercase file hash", func(t *testing.T, s *Store, m *Manifest) {
			m.Files[0].SHA256 = strings.ToUpper(m.Files[0].SHA256)
			writeRaw(t, s, manifestKey(m.Key, m.ID), must(s.signer.seal(m)))
		}, ErrCorrupt},
		{"path escapes the image dir", func(t *testing.T, s *Store, m *Manifest) {
			m.Files[0].Path = "../../etc/cron.d/x"
			writeRaw(t, s, manifestKey(m.Key, m.ID), must(s.signer.seal(m)))
		}, ErrCorrupt},
		{"other format version", func(t *testing.T, s *Store, m *Manifest) {
			b, _ := json.Marshal(envelope{Version: 3, Manifest: []byte(`{}`)})
			writeRaw(t, s, manifestKey(m.Key, m.ID), b)
		}, ErrUnsupportedVersion},
		{"only a version 1 manifest", func(t *testing.T, s *Store, m *Manifest) {
			_ = s.b.Delete(ctx, manifestKey(m.Key, m.ID))
			v1, _ := json.Marshal(map[string]any{"agent": m.Agent, "id": m.ID, "files": m.Files})
			writeRaw(t, s, legacyManifestKey(m.Agent, m.ID), v1)
		}, ErrUnsupportedVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newDirStore(t, CompressionNone)
			k := key("chat")
			m := putSmall(t, s, k, "ck", 3)
			tc.tamper(t, s, m)
			dst := t.TempDir()
			if _, err := s.Get(ctx, k, "ck", dst, nil); !errors.Is(err, tc.want) {
				t.Errorf("Get: %v, want %v", err, tc.want)
			} else {
				t.Logf("Get: %v", err)
			}
			if left, _ := os.ReadDir(dst); len(left) != 0 {
				t.Errorf("Get wrote %d entries from a refused manifest", len(left))
			}
			if tc.want == ErrUnsupportedVersion && strings.HasPrefix(tc.name, "only") {
				return // List sees no version 2 manifest: nothing to refuse
			}
			if _, err := s.Latest(ctx, k); !errors.Is(err, tc.want) {
				t.Errorf("Latest: %v, want %v", err, tc.want)
			}
			if _, err := s.Prune(ctx, k, Retention{KeepLast: 1}, time.Now()); !errors.Is(err, tc.want) {
				t.Errorf("Prune: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestLatestIsWriteOrder: "latest" is the checkpoint the store wrote last, whatever Created
// a manifest carries.
func TestLatestIsWriteOrder(t *testing.T) {
	ctx := context.Background()
	s, _ := newDirStore(t, CompressionNone)
	k := key("chat")
	first := putSmall(t, s, k, "first", 4)
	first.Created = time.Now().AddDate(100, 0, 0)
	if err := rewriteManifest(ctx, s, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // distinct mtimes on coarse filesystems
	putSmall(t, s, k, "second", 5)
	latest, err := s.Latest(ctx, k)
	if err != nil || latest.ID != "second" {
		t.Errorf("Latest = %v, %v; want second (written last), not first (claims a later Created)", latest, err)
	}
}

func TestSignerKey(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		ok      bool
	}{
		{"32 bytes and a newline", strings.Repeat("s", 32) + "\n", true},
		{"31 bytes", strings.Repeat("s", 31), false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "key")
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadSigner(p); (err == nil) != tc.ok {
				t.Errorf("LoadSigner: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if _, err := LoadSigner(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadSigner of a missing file succeeded")
	}
	d, _ := NewDir(t.TempDir())
	if _, err := New(d, Options{}); err == nil {
		t.Error("New without a Signer succeeded")
	}
}

func TestChunkKeyRefusesBadSums(t *testing.T) {
	for _, sum := range []string{"", "a", "ab", strings.Repeat("g", 64), strings.Repeat("a", 63), strings.Repeat("a", 64) + "/x", "../" + strings.Repeat("a", 61)} {
		if _, err := chunkKey(testNS, sum, CompressionNone); !errors.Is(err, ErrCorrupt) {
			t.Errorf("chunkKey(%q) = %v, want ErrCorrupt", sum, err)
		}
	}
	if k, err := chunkKey(testNS, strings.Repeat("a", 64), CompressionZstd); err != nil || k != "v2/tenant-a/chunks/aa/"+strings.Repeat("a", 64)+".zst" {
		t.Errorf("chunkKey = %q, %v", k, err)
	}
}

func readRaw(t *testing.T, s *Store, k string) []byte {
	t.Helper()
	rc, err := s.b.Get(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeRaw(t *testing.T, s *Store, k string, b []byte) {
	t.Helper()
	if err := s.b.Put(context.Background(), k, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
