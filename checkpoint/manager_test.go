package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/gpu"
	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

func TestMain(m *testing.M) {
	stateproc.MaybeRun()
	os.Exit(m.Run())
}

// events records the order of CRIU and cuda-checkpoint calls.
type events []string

// fakeCUDA stands for cuda-checkpoint and the processes' GPU state: a
// toggle flips a pid between running on the GPU (it holds a /dev/nvidia*
// descriptor) and suspended (it holds none); fail names pids whose toggle
// fails. A CRIU restore brings the processes back as they were dumped.
type fakeCUDA struct {
	ev        *events
	gpu       []int
	suspended map[int]bool
	fail      map[int]bool
}

func (f *fakeCUDA) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	*f.ev = append(*f.ev, filepath.Base(name)+" "+strings.Join(args, " "))
	pid, err := strconv.Atoi(args[len(args)-1])
	if err != nil {
		return nil, err
	}
	if f.fail[pid] {
		return []byte("busy"), errors.New("exit status 1")
	}
	f.suspended[pid] = !f.suspended[pid]
	return nil, nil
}

// usesGPU is what the hooks' descriptor scan sees.
func (f *fakeCUDA) usesGPU(pid int) bool { return slices.Contains(f.gpu, pid) && !f.suspended[pid] }

type fakeCRIU struct {
	ev      *events
	dumpErr error
}

func (f *fakeCRIU) Dump(_ context.Context, pid int, dir string, o criu.DumpOptions) error {
	*f.ev = append(*f.ev, fmt.Sprintf("criu dump %d leave=%v", pid, o.LeaveRunning))
	if f.dumpErr != nil {
		return f.dumpErr
	}
	return os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("pages"), 0o600)
}

func (f *fakeCRIU) Restore(_ context.Context, dir string, _ criu.RestoreOptions) (*criu.Restored, error) {
	if _, err := os.Stat(filepath.Join(dir, "pages-1.img")); err != nil {
		return nil, fmt.Errorf("restore without images: %w", err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	*f.ev = append(*f.ev, "criu restore")
	return criu.Adopt(cmd.Process.Pid)
}

// TestGPUToggleOrder checks the anchors' order: cuda-checkpoint before the
// CRIU dump (and again after it when leaving the process running), and after
// the CRIU restore; only processes that hold GPU state are suspended, and
// exactly those are resumed, though a suspended process holds no
// /dev/nvidia* descriptor to be found by.
func TestGPUToggleOrder(t *testing.T) {
	tests := []struct {
		name         string
		leaveRunning bool
		dumpErr      error
		gpu          []int
		fail         []int
		want         []string
	}{
		{"dump and stop", false, nil, []int{11}, nil, []string{
			"cuda-checkpoint --toggle --pid 11", "criu dump 10 leave=false", "criu restore", "cuda-checkpoint --toggle --pid 11"}},
		{"dump leave running", true, nil, []int{11}, nil, []string{
			"cuda-checkpoint --toggle --pid 11", "criu dump 10 leave=true", "cuda-checkpoint --toggle --pid 11",
			"criu restore", "cuda-checkpoint --toggle --pid 11"}},
		{"two GPU processes", false, nil, []int{11, 12}, nil, []string{
			"cuda-checkpoint --toggle --pid 11", "cuda-checkpoint --toggle --pid 12", "criu dump 10 leave=false", "criu restore",
			"cuda-checkpoint --toggle --pid 11", "cuda-checkpoint --toggle --pid 12"}},
		{"failed dump resumes GPU", false, errors.New("boom"), []int{11}, nil, []string{
			"cuda-checkpoint --toggle --pid 11", "criu dump 10 leave=false", "cuda-checkpoint --toggle --pid 11"}},
		{"failed toggle undoes only what it suspended", false, nil, []int{11, 12}, []int{12}, []string{
			"cuda-checkpoint --toggle --pid 11", "cuda-checkpoint --toggle --pid 12", "cuda-checkpoint --toggle --pid 11"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var ev events
			d, _ := store.NewDir(t.TempDir())
			st, _ := store.New(d, store.Options{Signer: testSigner(t)})
			cuda := &fakeCUDA{ev: &ev, gpu: tc.gpu, suspended: map[int]bool{}, fail: map[int]bool{}}
			for _, p := range tc.fail {
				cuda.fail[p] = true
			}
			hooks := &gpu.Hooks{
				Support: gpu.Support{Tool: "/usr/bin/cuda-checkpoint", Devices: []string{"/dev/nvidia0"}},
				Runner:  cuda,
				UsesGPU: cuda.usesGPU,
			}
			m := &Manager{CRIU: &fakeCRIU{ev: &ev, dumpErr: tc.dumpErr}, Store: st, GPU: hooks, WorkDir: t.TempDir(),
				Tree: func(pid int) []int { return []int{pid, 11, 12} }}
			wantErr := tc.dumpErr != nil || len(tc.fail) > 0
			_, err := m.Checkpoint(ctx, CheckpointRequest{Pid: 10, Key: testKey("a"), ID: "c1", LeaveRunning: tc.leaveRunning})
			if (err != nil) != wantErr {
				t.Fatalf("Checkpoint err = %v, want error %v", err, wantErr)
			}
			if err == nil {
				// CRIU restores the tree as it was dumped: suspended.
				cuda.suspended = map[int]bool{}
				for _, p := range tc.gpu {
					cuda.suspended[p] = true
				}
				r, err := m.Restore(ctx, RestoreRequest{Key: testKey("a"), ID: "c1"})
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				_ = r.Kill()
			}
			if !reflect.DeepEqual([]string(ev), tc.want) {
				t.Errorf("call order:\n got %q\nwant %q", ev, tc.want)
			}
			for p, s := range cuda.suspended {
				if s {
					t.Errorf("pid %d left suspended", p)
				}
			}
		})
	}
}

// TestRestoreWithoutGPUHooksRefused checks that a checkpoint holding
// suspended CUDA state is not restored where it cannot be resumed.
func TestRestoreWithoutGPUHooksRefused(t *testing.T) {
	ctx := context.Background()
	var ev events
	d, _ := store.NewDir(t.TempDir())
	st, _ := store.New(d, store.Options{Signer: testSigner(t)})
	cuda := &fakeCUDA{ev: &ev, gpu: []int{11}, suspended: map[int]bool{}, fail: map[int]bool{}}
	hooks := &gpu.Hooks{Support: gpu.Support{Tool: "/usr/bin/cuda-checkpoint", Devices: []string{"/dev/nvidia0"}}, Runner: cuda, UsesGPU: cuda.usesGPU}
	m := &Manager{CRIU: &fakeCRIU{ev: &ev}, Store: st, GPU: hooks, WorkDir: t.TempDir(), Tree: func(pid int) []int { return []int{pid, 11} }}
	if _, err := m.Checkpoint(ctx, CheckpointRequest{Pid: 10, Key: testKey("a"), ID: "c1"}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*gpu.Hooks{nil, {Support: gpu.Support{Reason: "no /dev/nvidia* devices"}, Runner: cuda}} {
		m2 := &Manager{CRIU: &fakeCRIU{ev: &ev}, Store: st, GPU: h, WorkDir: t.TempDir(), Tree: m.Tree}
		if r, err := m2.Restore(ctx, RestoreRequest{Key: testKey("a"), ID: "c1"}); err == nil {
			_ = r.Kill()
			t.Fatalf("restore with GPU hooks %+v succeeded; the CUDA state would stay suspended", h)
		}
	}
}

func TestParsePids(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"11 12", []int{11, 12}, false},
		{"[11 12]", []int{11, 12}, false}, // earlier checkpoints
		{"[]", nil, false},
		{"11 x", nil, true},
		{"-3", nil, true},
	} {
		got, err := parsePids(tc.in)
		if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parsePids(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil && tc.in != "" && tc.in[0] != '[' && formatPids(got) != tc.in {
			t.Errorf("formatPids(%v) = %q, want %q", got, formatPids(got), tc.in)
		}
	}
}

// requireCRIU returns a working CRIU client or skips with CRIU's reason.
func requireCRIU(t *testing.T) *criu.Client {
	t.Helper()
	if os.Geteuid() != 0 {
		testreq.Tool(t, "root", "CRIU needs root")
	}
	p, err := criu.Locate()
	if err != nil {
		testreq.Tool(t, "criu", "not found (hack/test-deps.d/30-criu.sh builds it): %v", err)
	}
	if err := criu.Check(context.Background(), p); err != nil {
		testreq.Tool(t, "criu", "criu check fails here: %v", err)
	}
	return &criu.Client{Path: p}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// writeWeights writes mib MiB of deterministic weights to a temp file.
func writeWeights(t *testing.T, mib int) string {
	t.Helper()
	b := make([]byte, mib<<20)
	stateproc.FillWeights(b)
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProcessCheckpointStoreRestore is the acceptance test: a process with a
// counter and a 256 MiB weights buffer is checkpointed, stored, restored from
// the store and continues from the same state; a corrupt chunk is detected
// before anything is restored. With mapped weights (a 256 MiB file mapped
// MAP_PRIVATE read-only, plus 16 MiB of anonymous state built from it) the
// images leave the weights out, the restored process still hashes to the
// same digest, and a weights file changed after the checkpoint is refused.
func TestProcessCheckpointStoreRestore(t *testing.T) {
	c := requireCRIU(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		comp    store.Compression
		corrupt bool
		mapped  bool
		// changeWeights rewrites one byte of the mapped file after the dump
		// (64 MiB of weights suffice for that case).
		changeWeights bool
	}{
		{name: "restore from store", comp: store.CompressionNone},
		{name: "corrupt chunk detected", comp: store.CompressionZstd, corrupt: true},
		{name: "mapped weights file", comp: store.CompressionNone, mapped: true},
		{name: "mapped weights file changed", comp: store.CompressionNone, mapped: true, changeWeights: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := t.TempDir()
			d, _ := store.NewDir(root)
			st, err := store.New(d, store.Options{Compression: tc.comp, Signer: testSigner(t)})
			if err != nil {
				t.Fatal(err)
			}
			m := &Manager{CRIU: c, Store: st, GPU: gpu.NewHooks(), WorkDir: t.TempDir()}
			opts := stateproc.Options{MiB: 256}
			if tc.mapped {
				if tc.changeWeights {
					opts.MiB = 64
				}
				opts.WeightsFile, opts.MapWeights, opts.StateMiB = writeWeights(t, opts.MiB), true, 16
			}
			cmd, err := stateproc.StartWith(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			before, err := stateproc.Verify(pid, dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := stateproc.WaitCounter(dir, 10, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			man, err := m.Checkpoint(ctx, CheckpointRequest{Pid: pid, Key: testKey("stateproc"), ID: "ck1"})
			if err != nil {
				t.Fatalf("Checkpoint: %v", err)
			}
			_ = cmd.Wait()
			switch {
			case !tc.mapped && man.TotalBytes < 256<<20:
				t.Errorf("checkpoint holds %d bytes, less than the 256 MiB of weights", man.TotalBytes)
			case tc.mapped && (man.TotalBytes < 16<<20 || man.TotalBytes > 64<<20):
				t.Errorf("checkpoint of mapped weights holds %d bytes, want the 16 MiB state and runtime, not the 256 MiB of weights", man.TotalBytes)
			}
			dumped, err := stateproc.ReadState(dir, "state")
			if err != nil {
				t.Fatal(err)
			}
			if tc.changeWeights {
				f, err := os.OpenFile(opts.WeightsFile, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, err = f.WriteAt([]byte{0xff}, 12345)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				r, err := m.Restore(ctx, RestoreRequest{Key: testKey("stateproc"), ID: "ck1"})
				if err == nil {
					_ = r.Kill()
					t.Fatal("Restore with a changed weights file succeeded")
				}
				if !errors.Is(err, ErrMappedFileChanged) || !strings.Contains(err.Error(), opts.WeightsFile) {
					t.Errorf("error %v does not wrap ErrMappedFileChanged naming %s", err, opts.WeightsFile)
				}
				if alive(pid) {
					t.Errorf("pid %d is running after a refused restore", pid)
				}
				t.Logf("changed weights error: %v", err)
				return
			}
			if tc.corrupt {
				prefix := "v2/" + testKey("stateproc").Namespace + "/chunks/"
				objs, err := d.List(ctx, prefix)
				if err != nil || len(objs) == 0 {
					t.Fatalf("no chunks under %s: %v", prefix, err)
				}
				var biggest store.Object
				for _, o := range objs {
					if o.Size > biggest.Size {
						biggest = o
					}
				}
				p := filepath.Join(root, biggest.Key)
				b, err := os.ReadFile(p)
				if err != nil || len(b) == 0 {
					t.Fatalf("reading chunk %s: %v", p, err)
				}
				b[len(b)/3] ^= 0x55
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
				r, err := m.Restore(ctx, RestoreRequest{Key: testKey("stateproc"), ID: "ck1"})
				if err == nil {
					_ = r.Kill()
					t.Fatal("Restore of a corrupt checkpoint succeeded")
				}
				if !errors.Is(err, store.ErrCorrupt) {
					t.Errorf("error %v does not wrap ErrCorrupt", err)
				}
				if alive(pid) {
					t.Errorf("pid %d is running after a failed restore", pid)
				}
				t.Logf("corruption error: %v", err)
				return
			}
			r, err := m.Restore(ctx, RestoreRequest{Key: testKey("stateproc"), ID: "ck1"})
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			defer r.Kill()
			after, err := stateproc.Verify(r.Pid, dir)
			if err != nil {
				t.Fatal(err)
			}
			if after.Digest != before.Digest {
				t.Errorf("weights digest %s after restore, want %s", after.Digest, before.Digest)
			}
			if after.Counter < dumped.Counter || dumped.Counter < 10 {
				t.Errorf("counter at dump %d, after restore %d: state did not continue", dumped.Counter, after.Counter)
			}
			t.Logf("stored %d bytes (%d new); counter %d -> %d", man.TotalBytes, man.NewBytes, dumped.Counter, after.Counter)
		})
	}
}
