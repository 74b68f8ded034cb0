package container

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// TestEvictCached: the entries of a checkpoint id go with EvictCached (whatever their agent key,
// and their emptied directories with them), other ids and namespaces stay, an entry a restore
// holds stays until released, names that are not one path element remove nothing, and
// CachedCheckpoints lists what is left.
func TestEvictCached(t *testing.T) {
	ctx := context.Background()
	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	root := filepath.Join(t.TempDir(), "cache")
	e := &Engine{Store: st, WorkDir: t.TempDir(), LocalCacheDir: root}
	put := func(k store.Key, id string) *store.Manifest {
		dir := dumpDir(t, 4096)
		m, err := st.Put(ctx, k, id, dir, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.cacheKeep(ctx, dir, m)
		return m
	}
	ka, kb := testKey("session.a"), testKey("session.b")
	other := store.Key{Namespace: "other", Agent: "session.a"}
	put(ka, ka.Namespace+".a-1-suspend")
	mb := put(kb, kb.Namespace+".b-1-suspend")
	put(other, ka.Namespace+".a-1-suspend") // the same id under another namespace
	if got := len(e.CachedCheckpoints()); got != 3 {
		t.Fatalf("CachedCheckpoints: %d entries, want 3", got)
	}

	for _, bad := range [][2]string{{"", ka.Namespace + ".a-1-suspend"}, {ka.Namespace, ""}, {"..", "x"}, {ka.Namespace, "../" + ka.Namespace}, {ka.Namespace + "/session.a", ka.Namespace + ".a-1-suspend"}} {
		if n, _ := e.EvictCached(bad[0], bad[1]); n != 0 {
			t.Errorf("EvictCached(%q, %q) removed %d, want 0", bad[0], bad[1], n)
		}
	}
	if n, held := e.EvictCached(ka.Namespace, ka.Namespace+".a-1-suspend"); n != 1 || held != 0 {
		t.Errorf("EvictCached = %d removed, %d held; want 1, 0", n, held)
	}
	if _, err := os.Stat(filepath.Join(root, ka.Namespace, ka.Agent)); !os.IsNotExist(err) {
		t.Errorf("the evicted key's empty directory is still there (%v)", err)
	}
	if _, err := os.Stat(e.cacheEntry(other, ka.Namespace+".a-1-suspend")); err != nil {
		t.Errorf("the same id of another namespace was evicted: %v", err)
	}

	// Held by a restore: it stays until released, then goes on the next eviction.
	_, release, ok := e.cacheLookup(kb, mb.ID, mb)
	if !ok {
		t.Fatal("no cache hit for b")
	}
	if n, held := e.EvictCached(kb.Namespace, mb.ID); n != 0 || held != 1 {
		t.Errorf("EvictCached of a held entry = %d removed, %d held; want 0, 1", n, held)
	}
	if _, err := os.Stat(e.cacheEntry(kb, mb.ID)); err != nil {
		t.Errorf("a held entry was removed: %v", err)
	}
	release()
	if n, _ := e.EvictCached(kb.Namespace, mb.ID); n != 1 {
		t.Errorf("EvictCached after release removed %d, want 1", n)
	}
	left := e.CachedCheckpoints()
	if len(left) != 1 || left[0].Key != other || left[0].ID != ka.Namespace+".a-1-suspend" || left[0].Used.IsZero() {
		t.Errorf("CachedCheckpoints = %+v, want only %v's entry", left, other)
	}

	// A dump kept after its key's directory was evicted finds its directory again.
	put(ka, ka.Namespace+".a-2-suspend")
	if _, err := os.Stat(e.cacheEntry(ka, ka.Namespace+".a-2-suspend")); err != nil {
		t.Errorf("a dump kept after an eviction is not cached: %v", err)
	}
	if (&Engine{}).CachedCheckpoints() != nil {
		t.Error("CachedCheckpoints of an engine without a cache is not nil")
	}
}
