package container

import "context"

// RestoreStep names one step of Engine.Restore, reported in order to the hook of WithRestoreSteps
// when the step ends.
type RestoreStep string

// The steps of a restore, in the order they end.
const (
	// StepStaged: the checkpoint is staged (fetched and verified, a prefetch waited for, or the
	// local cache entry of this node's own dump opened).
	StepStaged RestoreStep = "staged"
	// StepPrepared: the host container's spec is read, the restored container's spec adapted,
	// the mapped files checked and the workspace unpacked.
	StepPrepared RestoreStep = "prepared"
	// StepLazyDaemon: the `criu lazy-pages` daemon is started (lazy restores only).
	StepLazyDaemon RestoreStep = "lazy-pages daemon started"
	// StepContainer: the containerd container (and its rootfs snapshot) is created.
	StepContainer RestoreStep = "container created"
	// StepCRIURestore: containerd's task create returned: runc's CRIU restore rebuilt the
	// process (without its pages when lazy).
	StepCRIURestore RestoreStep = "CRIU restore (task create)"
	// StepResumed: the restored task is started (running) and, when lazy, handed to the daemon.
	StepResumed RestoreStep = "task started"
)

type restoreStepsKey struct{}

// WithRestoreSteps returns ctx carrying hook, which Engine.Restore calls as each RestoreStep of a
// restore under ctx ends (from the restoring goroutine; a failed step is not reported). It only
// observes: the restore does the same with or without it.
func WithRestoreSteps(ctx context.Context, hook func(RestoreStep)) context.Context {
	return context.WithValue(ctx, restoreStepsKey{}, hook)
}

// restoreStep reports step to ctx's hook, if it has one.
func restoreStep(ctx context.Context, step RestoreStep) {
	if hook, ok := ctx.Value(restoreStepsKey{}).(func(RestoreStep)); ok && hook != nil {
		hook(step)
	}
}
