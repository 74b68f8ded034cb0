package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/gpu"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"k8s.io/klog/v2"
)

// Dumper is the part of the CRIU client the manager uses.
type Dumper interface {
	Dump(ctx context.Context, pid int, imageDir string, opts criu.DumpOptions) error
	Restore(ctx context.Context, imageDir string, opts criu.RestoreOptions) (*criu.Restored, error)
}

// Manager checkpoints process trees into a store and restores them.
type Manager struct {
	CRIU  Dumper
	Store *store.Store
	// GPU toggles CUDA state; nil skips GPU handling.
	GPU *gpu.Hooks
	// WorkDir holds image directories while they move; it should be on
	// tmpfs or fast local disk.
	WorkDir string
	// Tree lists the pids of a tree for the GPU hooks and the mapped-file
	// scan; nil means gpu.Tree.
	Tree func(pid int) []int

	// digests caches the sha256 of mapped files by identity.
	digests DigestCache
}

// CheckpointRequest names a process and where its checkpoint goes.
type CheckpointRequest struct {
	Pid int
	// Key is the namespace and agent the checkpoint is stored under.
	Key store.Key
	ID  string
	// LeaveRunning keeps the process running after the dump.
	LeaveRunning bool
	Dump         criu.DumpOptions
	Labels       map[string]string
	Progress     store.ProgressFunc
}

func (m *Manager) tree(pid int) []int {
	if m.Tree != nil {
		return m.Tree(pid)
	}
	return gpu.Tree(pid)
}

// Checkpoint suspends GPU state (if any), dumps the tree with CRIU, resumes
// GPU state when leaving it running, and stores the images.
func (m *Manager) Checkpoint(ctx context.Context, req CheckpointRequest) (*store.Manifest, error) {
	logger := klog.FromContext(ctx).WithValues("key", req.Key.String(), "id", req.ID, "pid", req.Pid)
	dir, err := os.MkdirTemp(m.WorkDir, "dump-")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	defer os.RemoveAll(dir)
	images := filepath.Join(dir, "images")
	if err := os.Mkdir(images, 0o755); err != nil {
		return nil, fmt.Errorf("images dir: %w", err)
	}
	pids := m.tree(req.Pid)
	// Scanned before the dump, which may end the tree: CRIU leaves clean
	// pages of these files out of the images and maps the files again at
	// restore, so the restore must check they are unchanged.
	mapped, err := ScanMappedFiles(ctx, pids, nil)
	if err != nil {
		return nil, err
	}
	var suspended []int
	if m.GPU != nil {
		if suspended, err = m.GPU.Suspend(ctx, "pre-dump", pids); err != nil {
			// Put back exactly what was suspended before the failure.
			_, uerr := m.GPU.Resume(ctx, "undo", suspended)
			return nil, errors.Join(err, uerr)
		}
	}
	opts := req.Dump
	opts.LeaveRunning = req.LeaveRunning
	opts.LogDir = dir
	if err := m.CRIU.Dump(ctx, req.Pid, images, opts); err != nil {
		if m.GPU != nil {
			_, uerr := m.GPU.Resume(ctx, "undo", suspended)
			err = errors.Join(err, uerr)
		}
		return nil, err
	}
	if m.GPU != nil && req.LeaveRunning {
		if _, err := m.GPU.Resume(ctx, "post-dump", suspended); err != nil {
			return nil, err
		}
	}
	if err := RecordMappedFiles(images, mapped, &m.digests); err != nil {
		return nil, err
	}
	labels := map[string]string{labelGPUPids: formatPids(suspended)}
	for k, v := range req.Labels {
		labels[k] = v
	}
	man, err := m.Store.Put(ctx, req.Key, req.ID, images, labels, req.Progress)
	if err != nil {
		return nil, fmt.Errorf("store checkpoint: %w", err)
	}
	logger.Info("Checkpointed process", "bytes", man.TotalBytes, "newBytes", man.NewBytes)
	return man, nil
}

// RestoreRequest names a stored checkpoint to restore.
type RestoreRequest struct {
	// Key is the namespace and agent the checkpoint is stored under.
	Key      store.Key
	ID       string
	Restore  criu.RestoreOptions
	Progress store.ProgressFunc
	// MappedCheck selects how files the tree had mapped privately (model
	// weights mapped from the node's model cache) are checked before CRIU
	// maps them again; see MappedCheckIdentity.
	MappedCheck MappedCheck
}

// Restore fetches and fully verifies the checkpoint before CRIU runs, so
// corrupt images fail with store.ErrCorrupt and start nothing; files the
// tree had mapped privately must be unchanged (ErrMappedFileChanged). It then
// restores the tree and resumes GPU state; if that fails the restored tree
// is killed.
func (m *Manager) Restore(ctx context.Context, req RestoreRequest) (*criu.Restored, error) {
	dir, err := os.MkdirTemp(m.WorkDir, "restore-")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	images := filepath.Join(dir, "images")
	man, err := m.Store.Get(ctx, req.Key, req.ID, images, req.Progress)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("fetch checkpoint %s/%s: %w", req.Key, req.ID, err)
	}
	suspended, err := parsePids(man.Labels[labelGPUPids])
	if err == nil && len(suspended) > 0 && m.GPU == nil {
		err = fmt.Errorf("pids %v hold suspended CUDA state and GPU handling is off", suspended)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("checkpoint %s/%s: %w", req.Key, req.ID, err)
	}
	if err := CheckMappedFiles(images, req.MappedCheck); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("checkpoint %s/%s: %w", req.Key, req.ID, err)
	}
	opts := req.Restore
	opts.LogDir = dir
	r, err := m.CRIU.Restore(ctx, images, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// Lazy restores read pages from the images until the daemon is done.
	go func() {
		<-r.LazyDone()
		_ = os.RemoveAll(dir)
	}()
	if len(suspended) > 0 {
		if err := m.resumeRestored(ctx, r.Pid, suspended); err != nil {
			return nil, errors.Join(err, r.Kill())
		}
	}
	klog.FromContext(ctx).Info("Restored process", "key", req.Key.String(), "id", req.ID, "pid", r.Pid)
	return r, nil
}

// labelGPUPids is the manifest label with the pids whose CUDA state the
// checkpoint holds suspended.
const labelGPUPids = "gpuPids"

// resumeRestored resumes the CUDA state of the pids a checkpoint recorded.
// CRIU restores a tree with its original pids, so each must be in the
// restored tree; the suspended processes hold no /dev/nvidia* descriptor,
// so they are named by pid, not found by a scan.
func (m *Manager) resumeRestored(ctx context.Context, root int, suspended []int) error {
	tree := m.tree(root)
	for _, p := range suspended {
		if !slices.Contains(tree, p) {
			return fmt.Errorf("pid %d held suspended CUDA state but is not in the restored tree %v", p, tree)
		}
	}
	_, err := m.GPU.Resume(ctx, "post-restore", suspended)
	return err
}

// formatPids writes pids space-separated.
func formatPids(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}

// parsePids reads formatPids' output, and the "[11 12]" form of earlier
// checkpoints.
func parsePids(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(strings.Trim(s, "[]")) {
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("label %s=%q: not a list of pids", labelGPUPids, s)
		}
		out = append(out, p)
	}
	return out, nil
}
