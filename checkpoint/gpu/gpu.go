// Package gpu handles CUDA state around a CRIU checkpoint with NVIDIA's
// cuda-checkpoint tool.
//
// CRIU cannot dump GPU memory or driver state. The order the anchors use
// (NVIDIA's own CRIU plugin, Dynamo's snapshot agent, cedana) is:
//
//  1. `cuda-checkpoint --toggle --pid P` for every CUDA process of the tree:
//     the driver waits for outstanding work, copies device memory into host
//     memory and releases the GPU, so the process now holds no GPU resources.
//  2. CRIU dumps the tree; the CUDA state is ordinary host memory by then.
//  3. With leave-running, toggle again to move the state back onto the GPU.
//
// On restore, CRIU restores the tree first and then `cuda-checkpoint
// --toggle` on the PIDs suspended at checkpoint time (recorded with the
// checkpoint: a suspended process holds no /dev/nvidia* descriptor to find
// it by) reacquires the GPU and copies the state back.
// Without cuda-checkpoint on PATH or without /dev/nvidia* devices, GPU
// handling is skipped with a logged reason.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"
)

// Runner runs a command; tests replace it with a fake.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// Support says whether GPU state can be checkpointed here.
type Support struct {
	// Tool is the cuda-checkpoint path, empty if absent.
	Tool string
	// Devices are the /dev/nvidia* device nodes found.
	Devices []string
	// Reason explains why GPU checkpointing is unavailable; empty if available.
	Reason string
}

// Available reports whether cuda-checkpoint and GPU devices are present.
func (s Support) Available() bool { return s.Reason == "" }

// Detect looks for cuda-checkpoint on PATH and for /dev/nvidia[0-9]* devices.
func Detect() Support {
	devices, _ := filepath.Glob("/dev/nvidia[0-9]*")
	tool, _ := exec.LookPath("cuda-checkpoint")
	return support(devices, tool)
}

// support says what GPU checkpointing can do with these devices and this
// cuda-checkpoint path ("" when absent).
func support(devices []string, tool string) Support {
	s := Support{Devices: devices, Tool: tool}
	switch {
	case len(s.Devices) == 0 && s.Tool == "":
		s.Reason = "no /dev/nvidia* devices and no cuda-checkpoint on PATH: GPU state is not checkpointed"
	case len(s.Devices) == 0:
		s.Reason = "no /dev/nvidia* devices: GPU state is not checkpointed"
	case s.Tool == "":
		s.Reason = "cuda-checkpoint not on PATH: processes holding GPU state cannot be checkpointed"
	}
	return s
}

// Hooks suspends and resumes CUDA state around CRIU operations.
type Hooks struct {
	Support Support
	Runner  Runner
	// UsesGPU reports whether pid holds GPU state; nil means "has an open
	// /dev/nvidia* file descriptor".
	UsesGPU func(pid int) bool
}

// NewHooks returns hooks for this machine.
func NewHooks() *Hooks { return &Hooks{Support: Detect(), Runner: ExecRunner{}} }

func (h *Hooks) gpuPids(pids []int) []int {
	uses := h.UsesGPU
	if uses == nil {
		uses = openNvidia
	}
	var out []int
	for _, p := range pids {
		if uses(p) {
			out = append(out, p)
		}
	}
	return out
}

// Suspend runs `cuda-checkpoint --toggle --pid P` for each pid of the tree
// that holds GPU state (UsesGPU), in order, and returns the pids it
// suspended. When a toggle fails it returns the pids suspended before it,
// which are the only ones to Resume. It is a no-op that logs the reason
// when GPU checkpointing is unavailable. Call it before a CRIU dump.
func (h *Hooks) Suspend(ctx context.Context, phase string, pids []int) ([]int, error) {
	logger := klog.FromContext(ctx)
	if !h.Support.Available() {
		logger.V(2).Info("Skipping GPU state", "phase", phase, "reason", h.Support.Reason)
		return nil, nil
	}
	gpus := h.gpuPids(pids)
	for i, p := range gpus {
		if err := h.toggle(ctx, phase, p); err != nil {
			return gpus[:i], err
		}
	}
	return gpus, nil
}

// Resume toggles the CUDA state of exactly pids (which Suspend returned,
// or which a checkpoint recorded) back onto the GPU. A suspended process
// holds no /dev/nvidia* descriptor, so pids are not filtered. It tries
// every pid and returns those resumed and the joined errors of the others;
// without GPU checkpointing on this node, a non-empty pids is an error
// (their state would stay suspended).
func (h *Hooks) Resume(ctx context.Context, phase string, pids []int) ([]int, error) {
	if len(pids) == 0 {
		return nil, nil
	}
	if !h.Support.Available() {
		return nil, fmt.Errorf("resume CUDA state of pids %v (%s): %s", pids, phase, h.Support.Reason)
	}
	var done []int
	var errs []error
	for _, p := range pids {
		if err := h.toggle(ctx, phase, p); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, p)
	}
	return done, errors.Join(errs...)
}

func (h *Hooks) toggle(ctx context.Context, phase string, pid int) error {
	out, err := h.Runner.Run(ctx, h.Support.Tool, "--toggle", "--pid", fmt.Sprint(pid))
	if err != nil {
		return fmt.Errorf("cuda-checkpoint --toggle pid %d (%s): %w: %s", pid, phase, err, strings.TrimSpace(string(out)))
	}
	klog.FromContext(ctx).V(2).Info("Toggled CUDA state", "phase", phase, "pid", pid)
	return nil
}

// openNvidia reports whether pid has a /dev/nvidia* file open.
func openNvidia(pid int) bool {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		t, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(t, "/dev/nvidia") {
			return true
		}
	}
	return false
}

// Tree returns pid and all its descendants (via /proc/*/task/*/children).
func Tree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				var c int
				if _, err := fmt.Sscan(f, &c); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}
