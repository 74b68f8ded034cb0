// Package checkpoint checkpoints and restores agent processes with CRIU and
// keeps the images in a content-addressed store.
//
// The subpackages are:
//
//   - criu: a thin client over go-criu/v7 (dump, restore, kernel feature
//     detection) that runs the CRIU binary found by [criu.Locate].
//   - gpu: cuda-checkpoint detection and the order in which GPU state is
//     suspended and resumed around a CRIU dump or restore.
//   - store: the image store (content-defined chunks addressed by sha256, a
//     manifest per checkpoint, directory and S3 backends, zstd for remote
//     backends, retention).
//   - container: checkpoint and restore of containerd containers.
//
// This package ties them together for a plain process tree: [Manager.Checkpoint]
// dumps a process and stores the images; [Manager.Restore] fetches and verifies
// every byte before CRIU runs, so a corrupt image never starts a
// half-restored process.
//
// Package checkpoint imports no Kubernetes types.
package checkpoint
