package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// snapshotFlags are the flags of the AgentCheckpoint reconciler (package nodeagent/snapshot, owned by
// the checkpoint engineer); it is off unless --checkpoint-enabled.
type snapshotFlags struct {
	enabled       *bool
	containerd    *string
	storeDir      *string
	s3Endpoint    *string
	s3Bucket      *string
	s3Prefix      *string
	s3Secure      *bool
	workDir       *string
	runc          *string
	maxConcurrent *int
	signingKey    *string
	lazyRestore   *bool
	localCache    *string
	localCacheMax *int64
}

func registerSnapshotFlags(fs *flag.FlagSet) *snapshotFlags {
	return &snapshotFlags{
		enabled:       fs.Bool("checkpoint-enabled", false, "run the AgentCheckpoint reconciler (CRIU checkpoint/restore through containerd)"),
		containerd:    fs.String("containerd-socket", "/run/containerd/containerd.sock", "containerd address for checkpoint/restore"),
		storeDir:      fs.String("checkpoint-store-dir", "/var/lib/neuronetes/checkpoints", "local directory (or PV) of the checkpoint image store; unused with --checkpoint-s3-endpoint"),
		s3Endpoint:    fs.String("checkpoint-s3-endpoint", "", "host:port of an S3-compatible checkpoint store (credentials in env NEURONETES_CHECKPOINT_S3_ACCESS_KEY/_SECRET_KEY)"),
		s3Bucket:      fs.String("checkpoint-s3-bucket", "neuronetes-checkpoints", "bucket of the S3 checkpoint store"),
		s3Prefix:      fs.String("checkpoint-s3-prefix", "", "key prefix in the S3 checkpoint store"),
		s3Secure:      fs.Bool("checkpoint-s3-secure", true, "use https for the S3 checkpoint store; =false (plain http) only for a local test store"),
		workDir:       fs.String("checkpoint-work-dir", "", "staging directory for CRIU images (default /dev/shm/neuronetes-checkpoint)"),
		runc:          fs.String("runc-binary", "", "runc used for restored containers, e.g. hack/criu/runc-criu.sh"),
		maxConcurrent: fs.Int("checkpoint-max-concurrent", 2, "checkpoint/restore operations at once on this node"),
		lazyRestore:   fs.Bool("checkpoint-lazy-restore", false, "restore containers with CRIU lazy pages (userfaultfd): the agent runs before its memory is copied back"),
		localCache:    fs.String("checkpoint-local-cache-dir", "", "keep this node's dumps here after they are stored, so a restore on this node reads them in place instead of fetching (empty: off)"),
		localCacheMax: fs.Int64("checkpoint-local-cache-bytes", 0, "bytes the local checkpoint cache may hold (0: 8 GiB)"),
		signingKey:    fs.String("checkpoint-signing-key-file", "/etc/neuronetes/checkpoint-signing/key", "file with the key (at least 32 bytes) that signs and verifies checkpoint manifests; the same on every node agent, readable by nothing else"),
	}
}

// setupSnapshot registers the snapshot reconciler with mgr when enabled.
func setupSnapshot(ctx context.Context, mgr ctrl.Manager, f *snapshotFlags, node string) error {
	if !*f.enabled {
		return nil
	}
	cfg := snapshot.Config{ContainerdSocket: *f.containerd, StoreDir: *f.storeDir, WorkDir: *f.workDir, RuncBinary: *f.runc, SigningKeyFile: *f.signingKey, LazyRestore: *f.lazyRestore,
		LocalCacheDir: *f.localCache, LocalCacheBytes: *f.localCacheMax}
	if *f.s3Endpoint != "" {
		cfg.S3 = &store.S3Config{
			Endpoint: *f.s3Endpoint, Bucket: *f.s3Bucket, Prefix: *f.s3Prefix, Insecure: !*f.s3Secure,
			AccessKey: os.Getenv("NEURONETES_CHECKPOINT_S3_ACCESS_KEY"), SecretKey: os.Getenv("NEURONETES_CHECKPOINT_S3_SECRET_KEY"),
		}
	}
	eng, err := snapshot.NewEngine(ctx, cfg)
	if err != nil {
		return fmt.Errorf("checkpoint engine: %w", err)
	}
	if err := snapshot.Setup(mgr, snapshot.Options{NodeName: node, Engine: eng, MaxConcurrent: *f.maxConcurrent}); err != nil {
		return fmt.Errorf("checkpoint reconciler: %w", err)
	}
	return nil
}
