package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	containerd "github.com/containerd/containerd/v2/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint/workspace"
)

// workspaceArchive is the file, next to CRIU's images, that holds the workspace's files.
const workspaceArchive = "workspace.tar.zst"

// WorkspaceOptions name a directory of the container, bind-mounted from the node (an emptyDir),
// whose files a checkpoint carries and a restore writes into the host container's mount of the
// same path before the process is restored (volumes are not part of a container checkpoint).
type WorkspaceOptions struct {
	// Path is the mount's destination in the container, e.g. /workspace.
	Path string
	// Limit bounds the bytes of its files (the emptyDir's sizeLimit); it must be positive.
	Limit int64
	// Describe names the setting of Limit in errors, e.g. `emptyDir volume "workspace" sizeLimit`.
	Describe string
}

// WorkspaceMeta records a checkpoint's workspace in container.json.
type WorkspaceMeta struct {
	// Path is the container path the files came from and go back to.
	Path string `json:"path"`
	// Limit is the limit the archive was made under; a restore extracts at most this much.
	Limit int64 `json:"limit"`
	// Bytes and Entries describe the archive.
	Bytes   int64 `json:"bytes"`
	Entries int   `json:"entries"`
}

// bindSource returns the node path bind-mounted at dest in mounts.
func bindSource(mounts []specs.Mount, dest string) (string, bool) {
	dest = filepath.Clean(dest)
	for _, m := range mounts {
		if isBind(m) && filepath.Clean(m.Destination) == dest && filepath.IsAbs(m.Source) {
			return m.Source, true
		}
	}
	return "", false
}

// archiveWorkspace pauses the task (so the files match the memory CRIU dumps next) and archives
// the workspace into dir. The returned resume function resumes a task the dump left running; on
// an error the task is resumed before returning, so the container keeps running unchanged.
func archiveWorkspace(ctx context.Context, task containerd.Task, spec *specs.Spec, dir string, o WorkspaceOptions) (*WorkspaceMeta, func(), error) {
	if o.Limit <= 0 {
		return nil, nil, fmt.Errorf("workspace %s: %s is not set: a workspace is carried only with a size limit", o.Path, o.Describe)
	}
	src, ok := bindSource(spec.Mounts, o.Path)
	if !ok {
		return nil, nil, fmt.Errorf("workspace %s: the container has no bind mount there", o.Path)
	}
	if err := task.Pause(ctx); err != nil {
		return nil, nil, fmt.Errorf("pause the task to archive workspace %s: %w", o.Path, err)
	}
	resume := func() {
		// After a dump that stopped the container there is nothing to resume.
		if err := task.Resume(ctx); err != nil {
			klog.FromContext(ctx).V(2).Info("Resuming the task after the workspace archive", "err", err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, workspaceArchive), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		resume()
		return nil, nil, fmt.Errorf("workspace archive: %w", err)
	}
	st, err := workspace.Archive(src, f, o.Limit)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		resume()
		return nil, nil, fmt.Errorf("workspace %s (%s %d bytes): %w; nothing was checkpointed and the container keeps running", o.Path, o.Describe, o.Limit, err)
	}
	return &WorkspaceMeta{Path: o.Path, Limit: o.Limit, Bytes: st.Bytes, Entries: st.Entries}, resume, nil
}

// restoreWorkspace writes a checkpoint's workspace archive into the host container's own mount of
// the same path (the new pod's emptyDir), before the restored process, which may hold its files
// open, is created.
func restoreWorkspace(dir string, w *WorkspaceMeta, host *specs.Spec) error {
	dst, ok := bindSource(host.Mounts, w.Path)
	if !ok {
		return fmt.Errorf("restore needs the workspace %s and the host container has no bind mount there", w.Path)
	}
	f, err := os.Open(filepath.Join(dir, workspaceArchive))
	if err != nil {
		return fmt.Errorf("workspace archive: %w", err)
	}
	defer f.Close()
	if _, err := workspace.Extract(f, dst, w.Limit); err != nil {
		return fmt.Errorf("restore workspace %s: %w", w.Path, err)
	}
	return nil
}
