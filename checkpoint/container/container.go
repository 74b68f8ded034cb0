// Package container checkpoints and restores containers on containerd 2
// (the kubelet's containers live in containerd namespace "k8s.io") through
// the containerd/v2 client: runc checkpoints the task with CRIU into a
// directory, the image store keeps it, and a restore creates a new
// container from the same image whose task runc restores from the images.
//
// runc must reach a working CRIU: either criu on containerd's PATH, or the
// runc runtime's BinaryName set to hack/criu/runc-criu.sh (runc --criu
// <repo>/.local/bin/criu). Restored containers are created with that
// BinaryName when Engine.RuncBinary is set.
//
// Restore targets a running "host" container of a warm pod: the restored
// container joins the host container's network, IPC and UTS namespaces (so
// the warm pod's IP serves the restored agent) and its cgroup parent. The
// kubelet does not know the restored container; it carries labels naming the
// pod so the node agent can remove it with the pod (see Engine.Remove).
package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"k8s.io/klog/v2"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/neuronetes/neuronetes/checkpoint"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// Namespace is the containerd namespace of the kubelet's containers.
const Namespace = "k8s.io"

// Labels set on restored containers.
const (
	LabelRestoredFrom = "checkpoint.neuronetes.io/restored-from"
	LabelHost         = "checkpoint.neuronetes.io/host-container"
)

// metaFile holds what a restore needs besides CRIU's images.
const metaFile = "container.json"

// Meta is stored with each container checkpoint.
type Meta struct {
	// Image is the container's image reference.
	Image string `json:"image"`
	// Snapshotter is the snapshotter of the source container.
	Snapshotter string `json:"snapshotter"`
	// Spec is the source container's OCI runtime spec (raw JSON).
	Spec json.RawMessage `json:"spec"`
	// Workspace, when set, is the workspace archived next to the images (WorkspaceOptions).
	Workspace *WorkspaceMeta `json:"workspace,omitempty"`
}

// Engine checkpoints and restores containerd containers into a store.
type Engine struct {
	Client *containerd.Client
	Store  *store.Store
	// WorkDir stages image directories (tmpfs is best).
	WorkDir string
	// RuncBinary, if set, is the runc binary for restored containers
	// (e.g. hack/criu/runc-criu.sh).
	RuncBinary string
	// CriuPath is the CRIU binary that runs a lazy restore's page daemon (criu.Locate when
	// empty); runc's own CRIU is the one RuncBinary names.
	CriuPath string
	// LazyPages restores every container lazily (RestoreOptions.LazyPages).
	LazyPages bool
	// LocalCacheDir, when set, keeps this node's dumps after they are stored (0700, one entry
	// per store key, LocalCacheBytes in all, DefaultLocalCacheBytes when 0): a restore on this
	// node of a checkpoint whose signed manifest lists exactly an entry's files uses it in place
	// of a fetch (localCache).
	LocalCacheDir   string
	LocalCacheBytes int64
	cache           localCache
	// digests caches the sha256 of mapped files across checkpoints.
	digests checkpoint.DigestCache
	// PrefetchTTL bounds how long a prefetched checkpoint waits for its restore
	// (DefaultPrefetchTTL when 0).
	PrefetchTTL time.Duration
	// pre holds checkpoints fetched ahead of their restore (Prefetch).
	pre prefetches
	// lazy maps a restored container's ID to a channel closed when its lazy restore is done.
	lazy sync.Map
}

// Connect dials containerd at address.
func Connect(address string) (*containerd.Client, error) {
	c, err := containerd.New(address, containerd.WithDefaultNamespace(Namespace), containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect containerd %q: %w", address, err)
	}
	return c, nil
}

func nsCtx(ctx context.Context) context.Context {
	if _, ok := namespaces.Namespace(ctx); ok {
		return ctx
	}
	return namespaces.WithNamespace(ctx, Namespace)
}

// CheckpointOptions tune a container checkpoint.
type CheckpointOptions struct {
	// LeaveRunning keeps the container running after the dump.
	LeaveRunning bool
	// TCPEstablished dumps established TCP connections (they only restore
	// where the same addresses exist).
	TCPEstablished bool
	Labels         map[string]string
	Progress       store.ProgressFunc
	// Workspace, when set, is archived with the checkpoint while the task is paused, before the
	// dump; over its limit, the checkpoint fails and the container keeps running.
	Workspace *WorkspaceOptions
}

// Checkpoint dumps the container id with runc/CRIU and stores it as k/ckID.
func (e *Engine) Checkpoint(ctx context.Context, id string, k store.Key, ckID string, o CheckpointOptions) (*store.Manifest, error) {
	ctx = nsCtx(ctx)
	logger := klog.FromContext(ctx).WithValues("container", id, "key", k.String(), "id", ckID)
	// A lazily restored container still being filled by its page daemon is dumped only once
	// every page is in place.
	if err := e.waitLazy(ctx, id); err != nil {
		return nil, err
	}
	c, err := e.Client.LoadContainer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("load container %s: %w", id, err)
	}
	info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
	if err != nil {
		return nil, fmt.Errorf("container %s info: %w", id, err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("container %s task: %w", id, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(info.Spec.GetValue(), &spec); err != nil {
		return nil, fmt.Errorf("container %s spec: %w", id, err)
	}
	procs, err := task.Pids(ctx)
	if err != nil {
		return nil, fmt.Errorf("container %s pids: %w", id, err)
	}
	pids := make([]int, 0, len(procs))
	for _, p := range procs {
		pids = append(pids, int(p.Pid))
	}
	// Files the container maps privately from its bind mounts (a node-local
	// model cache): CRIU leaves their clean pages out and maps them again at
	// restore, which must find them unchanged. Files of the image's rootfs
	// are fixed by the image, which the restore requires too.
	mapped, err := checkpoint.ScanMappedFiles(ctx, pids, bindResolver(spec.Mounts))
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	dir, err := os.MkdirTemp(e.WorkDir, "ctr-dump-")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	defer os.RemoveAll(dir)
	images, work := filepath.Join(dir, "images"), filepath.Join(e.WorkDir, filepath.Base(dir)+"-work")
	defer os.RemoveAll(work)
	start := time.Now()
	var ws *WorkspaceMeta
	if o.Workspace != nil {
		// Paused through the dump (containerd leaves a paused task paused), so the files match
		// the memory; a dump that leaves the task running or fails resumes it.
		var resume func()
		if ws, resume, err = archiveWorkspace(ctx, task, &spec, dir, *o.Workspace); err != nil {
			return nil, fmt.Errorf("container %s: %w", id, err)
		}
		defer resume()
	}
	_, err = task.Checkpoint(ctx, func(i *containerd.CheckpointTaskInfo) error {
		i.Options = &options.CheckpointOptions{
			Exit:      !o.LeaveRunning,
			OpenTcp:   o.TCPEstablished,
			ImagePath: images,
			WorkPath:  work,
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint task of %s: %w%s", id, err, criuLog(work, "dump.log"))
	}
	if err := dumpWritten(images); err != nil {
		return nil, fmt.Errorf("checkpoint task of %s: %w", id, err)
	}
	logger.V(2).Info("Container dumped", "duration", time.Since(start), "mappedFiles", len(mapped), "workspace", ws)
	if err := checkpoint.RecordMappedFiles(dir, mapped, &e.digests); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	// Without leave-running the task exited with the dump; its owner (the
	// CRI plugin for kubelet containers) sees the exit and cleans it up.
	meta := Meta{Image: info.Image, Snapshotter: info.Snapshotter, Spec: info.Spec.GetValue(), Workspace: ws}
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", metaFile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, metaFile), b, 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", metaFile, err)
	}
	labels := map[string]string{"image": info.Image, "container": id}
	for k, v := range o.Labels {
		labels[k] = v
	}
	m, err := e.Store.Put(ctx, k, ckID, dir, labels, o.Progress)
	if err != nil {
		return nil, fmt.Errorf("store container checkpoint: %w", err)
	}
	e.cacheKeep(ctx, dir, m)
	logger.Info("Checkpointed container", "bytes", m.TotalBytes, "newBytes", m.NewBytes, "duration", time.Since(start))
	return m, nil
}

// dumpWritten fails unless CRIU's images are in images: a dump that runc ran against another
// directory (a staging directory the node agent does not share with containerd's shim) reports
// success but leaves nothing here, and storing that would lose the container's memory silently.
func dumpWritten(images string) error {
	if _, err := os.Stat(filepath.Join(images, "inventory.img")); err != nil {
		return fmt.Errorf("CRIU wrote no images to %s (is the checkpoint work directory the same on the node as in the node agent?): %w", images, err)
	}
	return nil
}

// criuLog returns the error lines (or the tail) of a CRIU log left in a
// runc work dir, for error messages.
func criuLog(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	var errs []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Error") && !strings.Contains(l, "RLIMIT_NOFILE") {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) == 0 {
		if len(b) > 800 {
			b = b[len(b)-800:]
		}
		return fmt.Sprintf(" (%s: %s)", name, b)
	}
	if len(errs) > 6 {
		errs = errs[:6]
	}
	return fmt.Sprintf(" (%s: %s)", name, strings.Join(errs, " | "))
}

// ErrNoHost is returned when the host container has no namespaces to join.
var ErrNoHost = errors.New("host container has no joinable network namespace")

// bindResolver places a path as a container with mounts sees it on the host:
// under the bind mount with the longest destination that holds it. Other
// paths (the image's rootfs, tmpfs, proc) are not placed.
func bindResolver(mounts []specs.Mount) checkpoint.Resolver {
	return func(path string) (string, bool) {
		best, local := -1, ""
		for _, m := range mounts {
			if !isBind(m) || !filepath.IsAbs(m.Source) {
				continue
			}
			dst := filepath.Clean(m.Destination)
			rel, ok := strings.CutPrefix(path, dst)
			if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && dst != "/") || len(dst) <= best {
				continue
			}
			best, local = len(dst), filepath.Join(m.Source, rel)
		}
		return local, best >= 0
	}
}

func isBind(m specs.Mount) bool {
	return m.Type == "bind" || hasOpt(m.Options, "bind") || hasOpt(m.Options, "rbind")
}
