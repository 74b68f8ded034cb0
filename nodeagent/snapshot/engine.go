package snapshot

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// Config is the node agent's checkpoint configuration (flags of cmd/nodeagent).
type Config struct {
	// ContainerdSocket is containerd's address (the local cluster's is
	// .local/containerd/containerd.sock).
	ContainerdSocket string
	// StoreDir is a local directory or PV for the image store; used when S3 is nil.
	StoreDir string
	// S3 selects an S3-compatible store instead (chunks zstd-compressed).
	S3 *store.S3Config
	// WorkDir stages images; default /dev/shm/neuronetes-checkpoint (tmpfs).
	WorkDir string
	// RuncBinary is the runc for restored containers, e.g. hack/criu/runc-criu.sh.
	RuncBinary string
	// LazyRestore restores containers with lazy pages (container.RestoreOptions.LazyPages): the
	// restored agent runs once CRIU rebuilt its mappings, and a CRIU page daemon fills its memory
	// from the verified staged images on first touch and in the background.
	LazyRestore bool
	// LocalCacheDir, when set, keeps this node's own dumps after they are stored (up to
	// LocalCacheBytes, container.DefaultLocalCacheBytes when 0), so a restore on this node of a
	// checkpoint whose signed manifest lists exactly a kept dump's files reads it in place
	// instead of fetching it (container.Engine.LocalCacheDir).
	LocalCacheDir   string
	LocalCacheBytes int64
	// SigningKeyFile holds the key that signs and verifies every manifest (store.LoadSigner);
	// required. Every node agent of a cluster reads the same key, and nothing else does.
	SigningKeyFile string
}

// ContainerdEngine is the Engine over containerd and the image store.
type ContainerdEngine struct {
	C *container.Engine
	// ctrs is what Checkpoint uses of C (a fake in tests); nil means C.
	ctrs containers
}

// containers is the part of container.Engine that Checkpoint uses.
type containers interface {
	RestoredInto(ctx context.Context, hostID string) (string, bool, error)
	Checkpoint(ctx context.Context, id string, k store.Key, ckID string, o container.CheckpointOptions) (*store.Manifest, error)
	Remove(ctx context.Context, id string) error
}

func (e *ContainerdEngine) containers() containers {
	if e.ctrs != nil {
		return e.ctrs
	}
	return e.C
}

// NewEngine connects to containerd and opens the store described by cfg.
func NewEngine(ctx context.Context, cfg Config) (*ContainerdEngine, error) {
	if cfg.SigningKeyFile == "" {
		return nil, fmt.Errorf("checkpoint config: SigningKeyFile is required (manifests are signed)")
	}
	signer, err := store.LoadSigner(cfg.SigningKeyFile)
	if err != nil {
		return nil, err
	}
	var b store.Backend
	switch {
	case cfg.S3 != nil:
		b, err = store.NewS3(ctx, *cfg.S3)
	case cfg.StoreDir != "":
		b, err = store.NewDir(cfg.StoreDir)
	default:
		return nil, fmt.Errorf("checkpoint config: StoreDir or S3 is required")
	}
	if err != nil {
		return nil, err
	}
	st, err := store.New(b, store.Options{Signer: signer})
	if err != nil {
		return nil, err
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = "/dev/shm/neuronetes-checkpoint"
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint WorkDir %q: %w", cfg.WorkDir, err)
	}
	if cfg.LocalCacheDir != "" {
		if err := os.MkdirAll(cfg.LocalCacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("checkpoint LocalCacheDir %q: %w", cfg.LocalCacheDir, err)
		}
	}
	cl, err := container.Connect(cfg.ContainerdSocket)
	if err != nil {
		return nil, err
	}
	return &ContainerdEngine{C: &container.Engine{Client: cl, Store: st, WorkDir: cfg.WorkDir, RuncBinary: cfg.RuncBinary, LazyPages: cfg.LazyRestore,
		LocalCacheDir: cfg.LocalCacheDir, LocalCacheBytes: cfg.LocalCacheBytes}}, nil
}

// Checkpoint implements Engine: it dumps the container, or the one restored into it when one
// runs there (container.Engine.RestoredInto). A restored container dumped without leave-running
// is removed once its checkpoint is stored: the kubelet does not know it, so nothing else would
// delete it before its host pod goes, and the restore of that checkpoint creates a new one.
func (e *ContainerdEngine) Checkpoint(ctx context.Context, c Container, k store.Key, id string, leaveRunning bool, p store.ProgressFunc) (*store.Manifest, error) {
	if k.Namespace != c.Namespace {
		return nil, fmt.Errorf("checkpoint of pod %s/%s under namespace %q: a checkpoint belongs to its pod's namespace", c.Namespace, c.Pod, k.Namespace)
	}
	ctrs := e.containers()
	// A container restored next to this one (a resumed session, a restored warm pod) is the
	// agent; this one is its host's pause process.
	target := c.ID
	restored, ok, err := ctrs.RestoredInto(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	if ok {
		klog.FromContext(ctx).V(2).Info("Checkpointing the container restored into the host", "host", c.ID, "restored", restored)
		target = restored
	}
	o := container.CheckpointOptions{
		LeaveRunning: leaveRunning,
		Labels:       map[string]string{"namespace": c.Namespace, "pod": c.Pod, "containerName": c.Name},
		Progress:     p,
	}
	if w := c.Workspace; w != nil {
		// A restored container's spec mounts the host pod's volume at the same path.
		o.Workspace = &container.WorkspaceOptions{Path: w.Path, Limit: w.Limit,
			Describe: fmt.Sprintf("emptyDir volume %q sizeLimit", w.Volume)}
	}
	m, err := ctrs.Checkpoint(ctx, target, k, id, o)
	if err != nil || !ok || leaveRunning {
		return m, err
	}
	// The dump stopped the restored container; its state is stored.
	if err := ctrs.Remove(ctx, restored); err != nil {
		klog.FromContext(ctx).Error(err, "Removing the checkpointed restored container (the periodic GC retries once its host is gone)", "restored", restored)
	} else {
		klog.FromContext(ctx).V(2).Info("Removed the checkpointed restored container", "restored", restored)
	}
	return m, nil
}

// Restore implements Engine: the checkpoint is restored into a new
// container that joins the target container's pod namespaces.
func (e *ContainerdEngine) Restore(ctx context.Context, c Container, k store.Key, id string, p store.ProgressFunc) error {
	if k.Namespace != c.Namespace {
		return fmt.Errorf("restore of %s/%s into pod %s/%s: a pod restores only its own namespace's checkpoints", k, id, c.Namespace, c.Pod)
	}
	_, err := e.C.Restore(ctx, c.ID, k, id, container.RestoreOptions{Progress: p})
	return err
}

// Latest implements Engine.
func (e *ContainerdEngine) Latest(ctx context.Context, k store.Key) (*store.Manifest, error) {
	return e.C.Store.Latest(ctx, k)
}

// Prune implements Engine.
func (e *ContainerdEngine) Prune(ctx context.Context, k store.Key, r store.Retention) (store.PruneResult, error) {
	return e.C.Store.Prune(ctx, k, r, time.Now())
}

// GC removes restored containers whose warm pod's host container is gone.
func (e *ContainerdEngine) GC(ctx context.Context) ([]string, error) { return e.C.GC(ctx) }
