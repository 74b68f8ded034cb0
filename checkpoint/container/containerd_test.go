package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

func TestMain(m *testing.M) {
	stateproc.MaybeRun()
	os.Exit(m.Run())
}

// repoRoot walks up to go.mod.
func repoRoot(t *testing.T) string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// startContainerd runs a private containerd (CRI disabled) from
// $NN_CONTAINERD_BIN or .local/bin, or skips.
func startContainerd(t *testing.T, root string) *containerd.Client {
	t.Helper()
	bin := os.Getenv("NN_CONTAINERD_BIN")
	if bin == "" {
		bin = filepath.Join(root, ".local", "bin")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			testreq.Tool(t, "containerd", "%s not found in %s (hack/build-tools.sh containerd, or set NN_CONTAINERD_BIN): %v", b, bin, err)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		testreq.Tool(t, "runc", "not on PATH: %v", err)
	}
	dir, err := os.MkdirTemp("", "nn-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"]
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	log, _ := os.Create(filepath.Join(dir, "containerd.log"))
	cmd := exec.Command(filepath.Join(bin, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+filepath.Join(root, ".local", "bin")+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := stateproc.WaitFile(sock, 30*time.Second); err != nil {
		t.Fatalf("containerd did not start: %v", err)
	}
	c, err := Connect(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// netns creates a named network namespace for the test.
func netns(t *testing.T, name string) string {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		testreq.Tool(t, "ip netns", "ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return "/var/run/netns/" + name
}

// makeRootfs builds a minimal rootfs holding the test binary (as
// /helper) and the shared libraries it links, plus mount points.
func makeRootfs(t *testing.T, dirs ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	files := []string{self}
	if out, err := exec.Command("ldd", self).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	for i, f := range files {
		dst := filepath.Join(rootfs, f)
		if i == 0 {
			dst = filepath.Join(rootfs, "helper")
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_ = os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range append([]string{"proc", "dev", "sys", "tmp", "run"}, dirs...) {
		_ = os.MkdirAll(filepath.Join(rootfs, d), 0o755)
	}
	return rootfs
}

// startContainer runs the helper in a container on rootfs, joining
// netnsPath, with dir bind-mounted at the same path.
func startContainer(t *testing.T, ctx context.Context, c *containerd.Client, id, runc, rootfs, netnsPath, dir string, env []string) containerd.Task {
	t.Helper()
	cont, err := c.NewContainer(ctx, id,
		containerd.WithRuntime("io.containerd.runc.v2", &options.Options{BinaryName: runc}),
		containerd.WithNewSpec(
			oci.WithRootFSPath(rootfs), oci.WithRootFSReadonly(),
			oci.WithProcessArgs("/helper", "-test.run=^$"),
			oci.WithEnv(env),
			oci.WithMounts([]specs.Mount{{Destination: dir, Type: "bind", Source: dir, Options: []string{"rbind", "rw"}}}),
			oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netnsPath}),
		))
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

// requireCRIUContainerd skips unless the test runs as root with a working
// CRIU, and returns a private containerd and the runc wrapper that uses it.
func requireCRIUContainerd(t *testing.T) (*containerd.Client, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testreq.Tool(t, "root", "CRIU and containerd need root")
	}
	root := repoRoot(t)
	p, err := criu.Locate()
	if err != nil {
		testreq.Tool(t, "criu", "not found (hack/test-deps.d/30-criu.sh builds it): %v", err)
	}
	if err := criu.Check(context.Background(), p); err != nil {
		testreq.Tool(t, "criu", "criu check fails here: %v", err)
	}
	c := startContainerd(t, root)
	return c, filepath.Join(root, "hack", "criu", "runc-criu.sh")
}

// TestContainerCheckpointRestoreIntoHost checkpoints a container running the
// stateful helper through containerd/runc/CRIU into the store and restores it
// into a new container inside another ("warm") container's network namespace.
func TestContainerCheckpointRestoreIntoHost(t *testing.T) {
	c, runc := requireCRIUContainerd(t)
	ctx := nsCtx(context.Background())
	dir, hostDir := t.TempDir(), t.TempDir()
	rootfs := makeRootfs(t, dir, hostDir)
	env := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + dir, stateproc.EnvMiB + "=64"}
	src := startContainer(t, ctx, c, "nn-ckpt-src", runc, rootfs, netns(t, fmt.Sprint("nn-ckpt-a-", os.Getpid())), dir, env)
	if err := stateproc.WaitFile(filepath.Join(dir, "ready"), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := stateproc.Verify(int(src.Pid()), dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stateproc.WaitCounter(dir, 10, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The warm pod's host container: the helper with a tiny buffer.
	hostEnv := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + hostDir, stateproc.EnvMiB + "=1"}
	host := startContainer(t, ctx, c, "nn-ckpt-host", runc, rootfs, netns(t, fmt.Sprint("nn-ckpt-b-", os.Getpid())), hostDir, hostEnv)

	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	e := &Engine{Client: c, Store: st, WorkDir: t.TempDir(), RuncBinary: runc}
	m, err := e.Checkpoint(ctx, "nn-ckpt-src", testKey("agent"), "ck1", CheckpointOptions{})
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	dumped, err := stateproc.ReadState(dir, "state")
	if err != nil {
		t.Fatal(err)
	}
	var steps []RestoreStep
	name, err := e.Restore(WithRestoreSteps(ctx, func(s RestoreStep) { steps = append(steps, s) }), "nn-ckpt-host", testKey("agent"), "ck1", RestoreOptions{})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	// An eager restore starts no lazy-pages daemon.
	if want := []RestoreStep{StepStaged, StepPrepared, StepContainer, StepCRIURestore, StepResumed}; !slices.Equal(steps, want) {
		t.Errorf("restore steps %q, want %q", steps, want)
	}
	task, after := verifyRestored(t, ctx, e, name, dir)
	if after.Digest != before.Digest || after.Counter < dumped.Counter {
		t.Errorf("restored state %+v, want digest %s and counter >= %d", after, before.Digest, dumped.Counter)
	}
	// The restored process lives in the host container's network namespace.
	want := "host container netns"
	gotNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", task.Pid()))
	hostNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", host.Pid()))
	if gotNS != hostNS {
		t.Errorf("restored netns %s, host container's %s (%s)", gotNS, hostNS, want)
	}
	// The host's restored container is found by its label, and can be checkpointed again
	// (its stdio are the shim's pipes to its log file, which CRIU can carry, not /dev/null).
	if got, ok, err := e.RestoredInto(ctx, "nn-ckpt-host"); err != nil || !ok || got != name {
		t.Errorf("RestoredInto(host) = %q %v %v, want %s", got, ok, err, name)
	}
	if got, ok, err := e.RestoredInto(ctx, "nn-ckpt-src"); err != nil || ok {
		t.Errorf("RestoredInto(source) = %q %v %v, want none", got, ok, err)
	}
	if _, err := os.Stat(e.RestoredLog(name)); err != nil {
		t.Errorf("restored container log: %v", err)
	}
	if _, err := e.Checkpoint(ctx, name, testKey("agent"), "ck2", CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("checkpoint of the restored container: %v", err)
	}
	// While the host runs, GC keeps the restored container; once the host
	// task is gone, GC removes it.
	if removed, err := e.GC(ctx); err != nil || len(removed) != 0 {
		t.Errorf("GC with a running host removed %v (err %v)", removed, err)
	}
	if _, err := host.Delete(ctx, containerd.WithProcessKill); err != nil {
		t.Fatal(err)
	}
	if removed, err := e.GC(ctx); err != nil || len(removed) != 1 || removed[0] != name {
		t.Errorf("GC after the host stopped removed %v (err %v), want [%s]", removed, err, name)
	}
	if _, err := os.Stat(e.RestoredLog(name)); !os.IsNotExist(err) {
		t.Errorf("restored container log after removal: %v, want it gone", err)
	}
	t.Logf("checkpoint %d bytes; counter %d -> %d; restored container %s", m.TotalBytes, dumped.Counter, after.Counter, name)
}

// verifyRestored removes the restored container name at cleanup and returns
// its task and the helper's state, verified in dir.
func verifyRestored(t *testing.T, ctx context.Context, e *Engine, name, dir string) (containerd.Task, stateproc.State) {
	t.Helper()
	t.Cleanup(func() { _ = e.Remove(context.Background(), name) })
	rc, err := e.Client.LoadContainer(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	task, err := rc.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stateproc.Verify(int(task.Pid()), dir)
	if err != nil {
		t.Fatal(err)
	}
	return task, st
}
