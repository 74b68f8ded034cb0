package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/checkpoint/workspace"
)

// startWithMounts runs the helper in a container on rootfs with the given bind mounts.
func startWithMounts(t *testing.T, ctx context.Context, c *containerd.Client, id, runc, rootfs, netnsPath string, mounts []specs.Mount, env []string) containerd.Task {
	t.Helper()
	cont, err := c.NewContainer(ctx, id,
		containerd.WithRuntime("io.containerd.runc.v2", &options.Options{BinaryName: runc}),
		containerd.WithNewSpec(oci.WithRootFSPath(rootfs), oci.WithRootFSReadonly(), oci.WithProcessArgs("/helper", "-test.run=^$"),
			oci.WithEnv(env), oci.WithMounts(mounts),
			oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netnsPath})))
	if err != nil {
		t.Fatalf("create container %s: %v", id, err)
	}
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatalf("create task %s: %v", id, err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start task %s: %v", id, err)
	}
	t.Cleanup(func() {
		_, _ = task.Delete(context.Background(), containerd.WithProcessKill)
		_ = cont.Delete(context.Background())
	})
	return task
}

func bind(dst, src string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "rw"}}
}

// TestContainerWorkspaceCheckpointRestore: a helper whose state file (held open) lives in its
// workspace bind mount. A checkpoint with a limit below the workspace fails with ErrTooLarge and
// leaves the task running and counting; one within it stores workspace.tar.zst; the source
// workspace is then emptied (the pod is gone) and the restore into a host whose own mount of the
// same path is an empty directory brings the files back there before CRIU runs: the restored
// helper continues its counter with the same digest, in the host's directory. A checkpoint
// without the workspace cannot be restored into such a host (CRIU misses the open file).
func TestContainerWorkspaceCheckpointRestore(t *testing.T) {
	c, runc := requireCRIUContainerd(t)
	ctx := nsCtx(context.Background())
	ws, hostWS, hostOwn := t.TempDir(), t.TempDir(), t.TempDir()
	rootfs := makeRootfs(t, ws, hostOwn)
	if err := os.MkdirAll(filepath.Join(ws, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes", "todo.txt"), []byte("call the tool\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	env := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + ws, stateproc.EnvMiB + "=16"}
	src := startWithMounts(t, ctx, c, "nn-ws-src", runc, rootfs, netns(t, fmt.Sprint("nn-ws-a-", os.Getpid())), []specs.Mount{bind(ws, ws)}, env)
	if err := stateproc.WaitFile(filepath.Join(ws, "ready"), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := stateproc.Verify(int(src.Pid()), ws)
	if err != nil {
		t.Fatal(err)
	}
	hostEnv := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + hostOwn, stateproc.EnvMiB + "=1"}
	startWithMounts(t, ctx, c, "nn-ws-host", runc, rootfs, netns(t, fmt.Sprint("nn-ws-b-", os.Getpid())),
		[]specs.Mount{bind(hostOwn, hostOwn), bind(ws, hostWS)}, hostEnv)
	if err := stateproc.WaitFile(filepath.Join(hostOwn, "ready"), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	e := &Engine{Client: c, Store: st, WorkDir: t.TempDir(), RuncBinary: runc}

	// Over the limit: refused, and the helper keeps running and counting.
	_, err = e.Checkpoint(ctx, "nn-ws-src", testKey("agent"), "small", CheckpointOptions{Workspace: &WorkspaceOptions{Path: ws, Limit: 8, Describe: "test limit"}})
	if !errors.Is(err, workspace.ErrTooLarge) {
		t.Fatalf("checkpoint over the limit: %v, want ErrTooLarge", err)
	}
	if s, err := src.Status(ctx); err != nil || s.Status != containerd.Running {
		t.Fatalf("source after the refused checkpoint: %v %v, want running", s.Status, err)
	}
	now, _ := stateproc.ReadState(ws, "state")
	if _, err := stateproc.WaitCounter(ws, now.Counter+2, 30*time.Second); err != nil {
		t.Fatalf("the helper stopped counting after the refused checkpoint: %v", err)
	}

	// Without the workspace the restore misses the open state file.
	if _, err := e.Checkpoint(ctx, "nn-ws-src", testKey("agent"), "bare", CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("checkpoint without workspace: %v", err)
	}
	if name, err := e.Restore(ctx, "nn-ws-host", testKey("agent"), "bare", RestoreOptions{}); err == nil {
		_ = e.Remove(ctx, name)
		t.Fatal("a checkpoint without its workspace restored into an empty workspace")
	} else {
		t.Logf("without the workspace the restore fails: %.300v", err)
	}

	m, err := e.Checkpoint(ctx, "nn-ws-src", testKey("agent"), "ck1", CheckpointOptions{Workspace: &WorkspaceOptions{Path: ws, Limit: 1 << 20, Describe: "test limit"}})
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if !slices.ContainsFunc(m.Files, func(f store.File) bool { return f.Path == workspaceArchive }) {
		t.Fatalf("manifest files %+v lack %s", m.Files, workspaceArchive)
	}
	dumped, err := stateproc.ReadState(ws, "state")
	if err != nil {
		t.Fatal(err)
	}
	// The source pod is gone: its workspace with it.
	for _, n := range []string{"state", "ready", "verify", "notes"} {
		if err := os.RemoveAll(filepath.Join(ws, n)); err != nil {
			t.Fatal(err)
		}
	}
	name, err := e.Restore(ctx, "nn-ws-host", testKey("agent"), "ck1", RestoreOptions{})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	_, after := verifyRestored(t, ctx, e, name, hostWS)
	if after.Digest != before.Digest || after.Counter < dumped.Counter {
		t.Fatalf("restored state %+v, want digest %s and counter >= %d", after, before.Digest, dumped.Counter)
	}
	if b, err := os.ReadFile(filepath.Join(hostWS, "notes", "todo.txt")); err != nil || string(b) != "call the tool\n" {
		t.Fatalf("host workspace notes/todo.txt: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "state")); !os.IsNotExist(err) {
		t.Fatalf("the restored helper wrote into the source's directory: %v", err)
	}
	t.Logf("checkpoint %d bytes with the workspace; counter %d -> %d in the host's workspace", m.TotalBytes, dumped.Counter, after.Counter)
}
