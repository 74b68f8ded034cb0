package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	c, runc := requireCRIUContainerd(t)
	ctx := nsCtx(context.Background())
	dir, hostDir := t.TempDir(), t.TempDir()
	rootfs := makeRootfs(t, dir, hostDir)
	env := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + dir, stateproc.EnvMiB + "=64"}
	src := startContainer(t, ctx, c, "nn-lazy-src", runc, rootfs, netns(t, fmt.Sprint("nn-lazy-a-", os.Getpid())), dir, env)
	if err := stateproc.WaitFile(filepath.Join(dir, "ready"), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := stateproc.Verify(int(src.Pid()), dir)
	if err != nil {
		t.Fatal(err)
	}
	hostEnv := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + hostDir, stateproc.EnvMiB + "=1"}
	startContainer(t, ctx, c, "nn-lazy-host", runc, rootfs, netns(t, fmt.Sprint("nn-lazy-b-", os.Getpid())), hostDir, hostEnv)

	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	e := &Engine{Client: c, Store: st, WorkDir: t.TempDir(), RuncBinary: runc}
	if _, err := e.Checkpoint(ctx, "nn-lazy-src", testKey("agent"), "ck1", CheckpointOptions{}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	dumped, err := stateproc.ReadState(dir, "state")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	name, err := e.Restore(ctx, "nn-lazy-host", testKey("agent"), "ck1", RestoreOptions{LazyPages: true})
	if err != nil {
		t.Fatalf("lazy Restore: %v", err)
	}
	restored := time.Since(start)
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
