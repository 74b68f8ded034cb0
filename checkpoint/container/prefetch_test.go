package container

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// TestPrefetch: a prefetched checkpoint is handed to the next take of the same key and id once
// (verified, byte for byte), a failed fetch (a corrupt chunk) hands nothing over and leaves no
// staging, and an unclaimed prefetch is removed after PrefetchTTL.
func TestPrefetch(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, _ := store.NewDir(root)
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	src := t.TempDir()
	data := bytes.Repeat([]byte("state-"), 200000)
	if err := os.WriteFile(filepath.Join(src, "pages-1.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	k := testKey("session.s")
	if _, err := st.Put(ctx, k, "ns.ck1", src, nil, nil); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Store: st, WorkDir: t.TempDir()}

	e.Prefetch(ctx, k, "ns.ck1", nil)
	e.Prefetch(ctx, k, "ns.ck1", nil) // a second one is the same fetch
	dir, ok, err := e.takePrefetch(ctx, k, "ns.ck1")
	if err != nil || !ok {
		t.Fatalf("takePrefetch = %q %v %v, want the staged images", dir, ok, err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "pages-1.img")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("prefetched file differs (%v)", err)
	}
	if _, ok, _ := e.takePrefetch(ctx, k, "ns.ck1"); ok {
		t.Error("a prefetch was handed over twice")
	}
	if _, ok, _ := e.takePrefetch(ctx, k, "ns.other"); ok {
		t.Error("another checkpoint id was handed a prefetch")
	}

	// A corrupt chunk: the fetch fails, nothing is handed over, nothing staged is left.
	err = filepath.WalkDir(filepath.Join(root), func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() && filepath.Base(filepath.Dir(filepath.Dir(p))) == "chunks" {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 1
			return os.WriteFile(p, b, 0o600)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e2 := &Engine{Store: st, WorkDir: t.TempDir()}
	e2.Prefetch(ctx, k, "ns.ck1", nil)
	if dir, ok, err := e2.takePrefetch(ctx, k, "ns.ck1"); ok || err != nil {
		t.Fatalf("takePrefetch of a corrupt checkpoint = %q %v %v, want nothing", dir, ok, err)
	}
	if left, _ := os.ReadDir(e2.WorkDir); len(left) != 0 {
		t.Errorf("staging left after a failed prefetch: %v", left)
	}
}

// TestPrefetchExpires: an unclaimed prefetch's staging is removed after PrefetchTTL.
func TestPrefetchExpires(t *testing.T) {
	ctx := context.Background()
	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "x.img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := testKey("session.s")
	if _, err := st.Put(ctx, k, "ns.ck1", src, nil, nil); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Store: st, WorkDir: t.TempDir(), PrefetchTTL: 100 * time.Millisecond}
	e.Prefetch(ctx, k, "ns.ck1", nil)
	e.pre.mu.Lock()
	pf := e.pre.m[prefetchKey(k, "ns.ck1")]
	e.pre.mu.Unlock()
	if pf == nil {
		t.Fatal("Prefetch recorded nothing")
	}
	<-pf.done
	if _, err := os.Stat(filepath.Join(pf.dir, "x.img")); err != nil || pf.err != nil {
		t.Fatalf("prefetched: %v %v", err, pf.err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, _ := os.ReadDir(e.WorkDir)
		e.pre.mu.Lock()
		n := len(e.pre.m)
		e.pre.mu.Unlock()
		if len(left) == 0 && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unclaimed prefetch still staged after its TTL: %v (%d in the map)", left, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
