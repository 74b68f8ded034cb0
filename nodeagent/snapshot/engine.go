package snapshot

import (
	"context"
	"fmt"
	"os"
	"time"

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
}

// ContainerdEngine is the Engine over containerd and the image store.
type ContainerdEngine struct {
	C *container.Engine
}

// NewEngine connects to containerd and opens the store described by cfg.
func NewEngine(ctx context.Context, cfg Config) (*ContainerdEngine, error) {
	var b store.Backend
	var err error
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
	st, err := store.New(b, store.Options{})
	if err != nil {
		return nil, err
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = "/dev/shm/neuronetes-checkpoint"
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint WorkDir %q: %w", cfg.WorkDir, err)
	}
	cl, err := container.Connect(cfg.ContainerdSocket)
	if err != nil {
		return nil, err
	}
	return &ContainerdEngine{C: &container.Engine{Client: cl, Store: st, WorkDir: cfg.WorkDir, RuncBinary: cfg.RuncBinary}}, nil
}

// Checkpoint implements Engine.
func (e *ContainerdEngine) Checkpoint(ctx context.Context, c Container, agent, id string, leaveRunning bool, p store.ProgressFunc) (*store.Manifest, error) {
	return e.C.Checkpoint(ctx, c.ID, agent, id, container.CheckpointOptions{
		LeaveRunning: leaveRunning,
		Labels:       map[string]string{"namespace": c.Namespace, "pod": c.Pod, "containerName": c.Name},
		Progress:     p,
	})
}

// Restore implements Engine: the checkpoint is restored into a new
// container that joins the target container's pod namespaces.
func (e *ContainerdEngine) Restore(ctx context.Context, c Container, agent, id string, p store.ProgressFunc) error {
	_, err := e.C.Restore(ctx, c.ID, agent, id, container.RestoreOptions{Progress: p})
	return err
}

// Latest implements Engine.
func (e *ContainerdEngine) Latest(ctx context.Context, agent string) (*store.Manifest, error) {
	return e.C.Store.Latest(ctx, agent)
}

// Prune implements Engine.
func (e *ContainerdEngine) Prune(ctx context.Context, agent string, r store.Retention) (store.PruneResult, error) {
	return e.C.Store.Prune(ctx, agent, r, time.Now())
}

// GC removes restored containers whose warm pod's host container is gone.
func (e *ContainerdEngine) GC(ctx context.Context) ([]string, error) { return e.C.GC(ctx) }
