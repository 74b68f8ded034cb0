package vector

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
)

func codec(t *testing.T, tenant string, seed byte) *frame.Codec {
	t.Helper()
	r, err := keys.NewRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{seed}, keys.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := frame.New(r, frame.Options{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// persisted returns an index of n entries (trained) and the path it was
// saved to with c.
func persisted(t *testing.T, c Sealer, n int) (*Index, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	x := New(Options{MinTrain: 500, Seed: 9})
	for i := range n {
		if _, err := x.Insert(fmt.Sprint("id", i), randVec(rng, 16), fmt.Appendf(nil, `{"secret":"meta-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	_ = x.Delete("id7")
	path := filepath.Join(t.TempDir(), "vectors.nnvx")
	if err := x.Save(path, c); err != nil {
		t.Fatal(err)
	}
	return x, path
}

func sameIndex(t *testing.T, x, y *Index) {
	t.Helper()
	if !slices.Equal(x.ids(), y.ids()) || x.Lists() != y.Lists() || x.Bytes() != y.Bytes() {
		t.Fatalf("loaded: %d ids, %d lists, %d bytes; saved %d, %d, %d", y.Len(), y.Lists(), y.Bytes(), x.Len(), x.Lists(), x.Bytes())
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10 {
		q := randVec(rng, 16)
		a, _ := x.Search(q, 5, Cosine, 4)
		b, _ := y.Search(q, 5, Cosine, 4)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("search differs after reload: %v vs %v", a, b)
		}
	}
}

func TestPersistenceSealed(t *testing.T) {
	c := codec(t, "team-a", 1)
	x, path := persisted(t, c, 3000) // a body of several chunks
	y, plaintext, err := Load(path, Options{}, c)
	if err != nil || plaintext {
		t.Fatalf("Load: plaintext %v, %v", plaintext, err)
	}
	sameIndex(t, x, y)

	// At rest: neither the metadata nor any vector appears in the file.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("meta-12")) || bytes.Contains(b, []byte(fileMagic)) {
		t.Fatal("the shard file holds plaintext metadata or the plaintext body")
	}
	l, p := x.lists[x.locs["id12"].list], int(x.locs["id12"].pos)
	var vec []byte
	for _, f := range l.vecs[p*16 : p*16+4] {
		vec = binary.LittleEndian.AppendUint32(vec, math.Float32bits(f))
	}
	if bytes.Contains(b, vec) {
		t.Fatal("the shard file holds a plaintext vector")
	}
}

// reCRC rewrites a sealed file's trailing checksum, as a tamperer would.
func reCRC(b []byte) []byte {
	body := b[:len(b)-4]
	return binary.LittleEndian.AppendUint32(slices.Clone(body), crc32.Checksum(body, crcTable))
}

// records returns the offsets of a sealed file's records.
func records(b []byte) []int {
	var offs []int
	for off := len(sealedMagic) + 4 + saveIDLen; off < len(b)-4; off += 4 + int(binary.LittleEndian.Uint32(b[off:])) {
		offs = append(offs, off)
	}
	return offs
}

func TestLoadRejects(t *testing.T) {
	c := codec(t, "team-a", 1)
	_, path := persisted(t, c, 3000)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	offs := records(good)
	if len(offs) < 3 {
		t.Fatalf("%d records: the cases below need at least 3", len(offs))
	}
	flip := func(b []byte, i int) []byte { b = slices.Clone(b); b[i] ^= 1; return b }
	for _, tc := range []struct {
		name  string
		file  []byte
		codec Sealer
	}{
		{"another tenant", good, codec(t, "team-b", 1)},
		{"another key", good, codec(t, "team-a", 2)},
		{"torn write", flip(good, len(good)/2), c},
		{"tampered, checksum fixed", reCRC(flip(good, offs[1]+40)), c},
		{"last chunk dropped", reCRC(append(slices.Clone(good[:offs[len(offs)-1]]), 0, 0, 0, 0)), c},
		{"chunks swapped", reCRC(slices.Concat(good[:offs[0]], good[offs[1]:offs[2]], good[offs[0]:offs[1]], good[offs[2]:])), c},
		{"short", good[:10], c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.nnvx")
			if err := os.WriteFile(bad, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Load(bad, Options{}, tc.codec); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load = %v, want ErrCorrupt", err)
			}
		})
	}
	if _, _, err := Load(filepath.Join(t.TempDir(), "none"), Options{}, c); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing load: %v", err)
	}
}

// TestLoadPlaintextShard reads a shard written unsealed, as releases before
// encryption at rest did, and reports it so the caller re-saves it sealed.
func TestLoadPlaintextShard(t *testing.T) {
	c := codec(t, "team-a", 1)
	x, _ := persisted(t, c, 1200)
	var body bytes.Buffer
	if err := x.writeBody(&body); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.nnvx")
	if err := os.WriteFile(path, body.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	y, plaintext, err := Load(path, Options{}, c)
	if err != nil || !plaintext {
		t.Fatalf("Load of a plaintext shard: plaintext %v, %v", plaintext, err)
	}
	sameIndex(t, x, y)
	if err := y.Save(path, c); err != nil {
		t.Fatal(err)
	}
	if _, plaintext, err := Load(path, Options{}, c); err != nil || plaintext {
		t.Fatalf("after re-save: plaintext %v, %v", plaintext, err)
	}
}

// TestSaveWithoutKey checks that a codec without a key writes nothing:
// never a plaintext shard.
func TestSaveWithoutKey(t *testing.T) {
	c, err := frame.New(keys.Empty(), frame.Options{Tenant: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	x := New(Options{})
	if _, err := x.Insert("a", []float32{1, 2}, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v.nnvx")
	if err := x.Save(path, c); err == nil {
		t.Fatal("Save without a key succeeded")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file was left: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".vectors-*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}
