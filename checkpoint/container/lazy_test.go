package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// TestContainerLazyRestore restores a container checkpoint through containerd and runc with lazy
// pages (the container's CRIU configuration says lazy-pages, a `criu lazy-pages` daemon serves
// the staged images): the restored helper's 64 MiB buffer hashes to the dumped digest, the
// staging directory goes once the daemon has served every page, the configuration is empty
// afterwards, and the restored container checkpoints again (an eager dump).
func TestContainerLazyRestore(t *testing.T) {
	ctx, e, dir, before, dumped := lazySetup(t, "nn-lazy")
	start := time.Now()
	var steps []RestoreStep
	sctx := WithRestoreSteps(ctx, func(s RestoreStep) { steps = append(steps, s) })
	name, err := e.Restore(sctx, "nn-lazy-host", testKey("agent"), "ck1", RestoreOptions{LazyPages: true})
	if err != nil {
		t.Fatalf("lazy Restore: %v", err)
	}
	restored := time.Since(start)
	if want := []RestoreStep{StepStaged, StepPrepared, StepLazyDaemon, StepContainer, StepCRIURestore, StepResumed}; !slices.Equal(steps, want) {
		t.Errorf("lazy restore steps %q, want %q", steps, want)
	}
	if _, running := e.lazy.Load(name); !running {
		t.Log("the lazy-pages daemon was done before Restore returned")
	}
	_, after := verifyRestored(t, ctx, e, name, dir)
	if after.Digest != before.Digest || after.Counter < dumped.Counter {
		t.Errorf("lazily restored state %+v, want digest %s and counter >= %d", after, before.Digest, dumped.Counter)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.waitLazy(wctx, name); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.WorkDir, "ctr-restore-*")); len(left) != 0 {
		t.Errorf("staged images left after the lazy restore: %v", left)
	}
	if b, err := os.ReadFile(e.criuConfig(name)); err != nil || len(b) != 0 {
		t.Errorf("CRIU configuration after the restore: %q (%v), want empty", b, err)
	}
	if _, err := e.Checkpoint(ctx, name, testKey("agent"), "ck2", CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("checkpoint of the lazily restored container: %v", err)
	}
	if err := e.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.criuConfig(name)); !os.IsNotExist(err) {
		t.Errorf("CRIU configuration after Remove: %v, want it gone", err)
	}
	t.Logf("lazy restore returned after %v; counter %d -> %d", restored, dumped.Counter, after.Counter)
}

// lazySetup runs the stateful helper (64 MiB) in container <prefix>-src, checkpoints it into a
// store as ck1 and starts a host container <prefix>-host; it returns the engine, the helper's
// state dir, its state before the dump and as dumped.
func lazySetup(t *testing.T, prefix string) (context.Context, *Engine, string, stateproc.State, stateproc.State) {
	t.Helper()
	return lazySetupMiB(t, prefix, "64", "")
}

// lazySetupMiB is lazySetup with the helper's buffer size and the engine's LocalCacheDir.
func lazySetupMiB(t *testing.T, prefix, mib, cacheDir string) (context.Context, *Engine, string, stateproc.State, stateproc.State) {
	t.Helper()
	c, runc := requireCRIUContainerd(t)
	ctx := nsCtx(context.Background())
	dir, hostDir := t.TempDir(), t.TempDir()
	rootfs := makeRootfs(t, dir, hostDir)
	env := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + dir, stateproc.EnvMiB + "=" + mib}
	src := startContainer(t, ctx, c, prefix+"-src", runc, rootfs, netns(t, fmt.Sprint(prefix, "-a-", os.Getpid())), dir, env)
	if err := stateproc.WaitFile(filepath.Join(dir, "ready"), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := stateproc.Verify(int(src.Pid()), dir)
	if err != nil {
		t.Fatal(err)
	}
	hostEnv := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + hostDir, stateproc.EnvMiB + "=1"}
	startContainer(t, ctx, c, prefix+"-host", runc, rootfs, netns(t, fmt.Sprint(prefix, "-b-", os.Getpid())), hostDir, hostEnv)
	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	e := &Engine{Client: c, Store: st, WorkDir: t.TempDir(), RuncBinary: runc, LocalCacheDir: cacheDir}
	if _, err := e.Checkpoint(ctx, prefix+"-src", testKey("agent"), "ck1", CheckpointOptions{}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	dumped, err := stateproc.ReadState(dir, "state")
	if err != nil {
		t.Fatal(err)
	}
	return ctx, e, dir, before, dumped
}

// TestContainerLazyRestoreFallsBackToEager: a lazy restore this node cannot do (here: no CRIU
// for the page daemon) restores eagerly from the same verified images, under another name, and
// leaves neither the failed container nor staged images.
func TestContainerLazyRestoreFallsBackToEager(t *testing.T) {
	ctx, e, dir, before, dumped := lazySetup(t, "nn-lazyfb")
	e.CriuPath, e.LazyPages = "/nonexistent/criu", true
	name, err := e.Restore(ctx, "nn-lazyfb-host", testKey("agent"), "ck1", RestoreOptions{Name: "nn-lazyfb-restored"})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if name != "nn-lazyfb-restored-eager" {
		t.Errorf("restored container %q, want the eager fallback nn-lazyfb-restored-eager", name)
	}
	if _, running := e.lazy.Load(name); running {
		t.Error("the fallback restore has a lazy-pages daemon")
	}
	_, after := verifyRestored(t, ctx, e, name, dir)
	if after.Digest != before.Digest || after.Counter < dumped.Counter {
		t.Errorf("restored state %+v, want digest %s and counter >= %d", after, before.Digest, dumped.Counter)
	}
	if _, err := e.Client.LoadContainer(ctx, "nn-lazyfb-restored"); err == nil {
		t.Error("the failed lazy container is left in containerd")
	}
	if left, _ := filepath.Glob(filepath.Join(e.WorkDir, "ctr-restore-*")); len(left) != 0 {
		t.Errorf("staged images left: %v", left)
	}
}

// TestContainerRestoreFromLocalCache: with a local cache the dump stays on the node after it is
// stored, and a lazy restore of it reads the cache entry in place (no staging copy): the restored
// helper hashes to the dumped digest, and the entry stays for the next restore.
func TestContainerRestoreFromLocalCache(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	ctx, e, dir, before, dumped := lazySetupMiB(t, "nn-lcache", "64", cache)
	entry := e.cacheEntry(testKey("agent"), "ck1")
	if _, err := os.Stat(filepath.Join(entry, "images")); err != nil {
		t.Fatalf("dump not kept in the local cache: %v", err)
	}
	m, err := e.Store.Manifest(ctx, testKey("agent"), "ck1")
	if err != nil {
		t.Fatal(err)
	}
	if _, rel, ok := e.cacheLookup(testKey("agent"), "ck1", m); !ok {
		t.Fatal("the stored dump's manifest does not hit its cache entry")
	} else {
		rel()
	}
	name, err := e.Restore(ctx, "nn-lcache-host", testKey("agent"), "ck1", RestoreOptions{LazyPages: true})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	_, after := verifyRestored(t, ctx, e, name, dir)
	if after.Digest != before.Digest || after.Counter < dumped.Counter {
		t.Errorf("restored state %+v, want digest %s and counter >= %d", after, before.Digest, dumped.Counter)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.waitLazy(wctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(entry, "images")); err != nil {
		t.Errorf("cache entry gone after the restore: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.WorkDir, "ctr-restore-*")); len(left) != 0 {
		t.Errorf("work directories left: %v", left)
	}
	e.cache.mu.Lock()
	held := len(e.cache.inUse)
	e.cache.mu.Unlock()
	if held != 0 {
		t.Errorf("%d cache entries still held after the restore", held)
	}
}
