package container

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// dumpDir writes a fake dump (container.json, images/pages-1.img of n bytes) and returns it.
func dumpDir(t *testing.T, n int) string {
	t.Helper()
	d := t.TempDir()
	if err := os.MkdirAll(filepath.Join(d, "images"), 0o700); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 31)
	}
	if err := os.WriteFile(filepath.Join(d, "images", "pages-1.img"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, metaFile), []byte(`{"image":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestLocalCache: a stored dump kept in the local cache is found for its signed manifest only
// (another manifest, a changed file size or another key miss), is replaced by the key's next
// dump, and the oldest entries go over the byte limit unless a restore holds them; stage reads a
// hit in place (no fetch) and fetches otherwise.
func TestLocalCache(t *testing.T) {
	ctx := context.Background()
	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	e := &Engine{Store: st, WorkDir: t.TempDir(), LocalCacheDir: filepath.Join(t.TempDir(), "cache"), LocalCacheBytes: 3 << 20}
	put := func(k store.Key, id string, n int) *store.Manifest {
		dir := dumpDir(t, n)
		m, err := st.Put(ctx, k, id, dir, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.cacheKeep(ctx, dir, m)
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("dump dir %s still there after cacheKeep (%v), want it moved", dir, err)
		}
		return m
	}
	ka, kb := testKey("session.a"), testKey("session.b")
	m1 := put(ka, "ns.a-1", 1<<20)
	dir, release, ok := e.cacheLookup(ka, "ns.a-1", m1)
	if !ok {
		t.Fatal("no cache hit for the stored dump")
	}
	release()
	if fi, err := os.Stat(filepath.Dir(filepath.Dir(dir))); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cache directory mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	if _, _, ok := e.cacheLookup(kb, "ns.a-1", m1); ok {
		t.Error("another key hit the entry")
	}
	other := *m1
	other.Files = append([]store.File(nil), m1.Files...)
	other.Files[0].SHA256 = "0000000000000000000000000000000000000000000000000000000000000000"
	if _, _, ok := e.cacheLookup(ka, "ns.a-1", &other); ok {
		t.Error("a manifest with another file digest hit the entry")
	}
	if err := os.Truncate(filepath.Join(dir, "images", "pages-1.img"), 10); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := e.cacheLookup(ka, "ns.a-1", m1); ok {
		t.Error("an entry with a truncated file hit")
	}

	// stage: a hit is read in place; a miss is fetched (and verified) into a staging directory.
	m2 := put(ka, "ns.a-2", 1<<20)
	if _, err := os.Stat(e.cacheEntry(ka, "ns.a-1")); !os.IsNotExist(err) {
		t.Errorf("the key's older entry is still cached (%v)", err)
	}
	img, work, rel, how, err := e.stage(ctx, ka, "ns.a-2", nil)
	if err != nil || how != "cache" || img != e.cacheEntry(ka, "ns.a-2") || work == img {
		t.Fatalf("stage = %q %q %q %v, want the cache entry in place", img, work, how, err)
	}
	// Held by that restore: eviction spares it.
	put(kb, "ns.b-1", 1<<20)
	put(testKey("session.c"), "ns.c-1", 1<<20)
	if _, err := os.Stat(e.cacheEntry(ka, "ns.a-2")); err != nil {
		t.Errorf("an entry in use was evicted: %v", err)
	}
	rel()
	os.RemoveAll(work)
	put(testKey("session.d"), "ns.d-1", 1<<20)
	if _, err := os.Stat(e.cacheEntry(ka, "ns.a-2")); !os.IsNotExist(err) {
		t.Errorf("the least recently used entry survived eviction over the limit (%v)", err)
	}
	if _, err := os.Stat(e.cacheEntry(testKey("session.d"), "ns.d-1")); err != nil {
		t.Errorf("the newest entry was evicted: %v", err)
	}
	img, work, rel, how, err = e.stage(ctx, ka, "ns.a-2", nil)
	if err != nil || how != "fetch" || img != work {
		t.Fatalf("stage after eviction = %q %q %q %v, want a fetch", img, work, how, err)
	}
	rel()
	if b, err := os.ReadFile(filepath.Join(img, "images", "pages-1.img")); err != nil || len(b) != 1<<20 {
		t.Errorf("fetched image: %d bytes, %v", len(b), err)
	}
	_ = m2
}
