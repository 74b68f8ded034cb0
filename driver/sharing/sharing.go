// Package sharing makes GPU sharing take effect: it sets a GPU's compute time slice through
// nvidia-smi compute-policy and runs one CUDA MPS control daemon per configured device group
// (nvidia-cuda-mps-control), with its pipe and log directories under a root the driver mounts
// into the claim's containers. Both tools are run by path, optionally inside a chroot (the host's
// driver root), so that a recording stand-in can replace them where no GPU exists.
package sharing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/config"
)

// Paths inside the claim's containers (the ones NVIDIA's driver uses).
const (
	ContainerPipeDir = "/tmp/nvidia-mps"
	ContainerLogDir  = "/var/log/nvidia-mps"
)

// ErrNotConfigured reports that the tool a setting needs has no configured path (mock NVML).
var ErrNotConfigured = errors.New("not configured")

// Command is one run of a tool.
type Command struct {
	Path   string
	Args   []string
	Env    []string
	Stdin  string
	Chroot string
}

func (c Command) String() string { return strings.Join(append([]string{c.Path}, c.Args...), " ") }

// Runner runs a command and returns its combined output.
type Runner func(ctx context.Context, c Command) ([]byte, error)

// Exec runs c as a child process; with Chroot set, inside that root.
func Exec(ctx context.Context, c Command) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	if c.Stdin != "" {
		cmd.Stdin = strings.NewReader(c.Stdin)
	}
	if c.Chroot != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.Chroot}
		cmd.Dir = "/"
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Tools runs nvidia-smi and nvidia-cuda-mps-control.
type Tools struct {
	// NvidiaSMI is the path of nvidia-smi ("" when not configured).
	NvidiaSMI string
	// MPSControl is the path of nvidia-cuda-mps-control ("" when not configured).
	MPSControl string
	// Chroot, when set, is the root both tools run in (the host's driver root); MPSRoot must then
	// be the same path inside and outside it.
	Chroot string
	// MPSRoot holds one directory per MPS daemon.
	MPSRoot string
	// Run runs the tools; nil uses Exec.
	Run Runner
}

func (t *Tools) run(ctx context.Context, c Command) error {
	run := t.Run
	if run == nil {
		run = Exec
	}
	c.Chroot = t.Chroot
	out, err := run(ctx, c)
	if err != nil {
		return fmt.Errorf("%s: %w: %s", c, err, strings.TrimSpace(string(out)))
	}
	klog.FromContext(ctx).V(2).Info("Ran GPU sharing tool", "command", c.String(), "output", strings.TrimSpace(string(out)))
	return nil
}

// SetTimeSlice sets the compute time slice of one GPU.
func (t *Tools) SetTimeSlice(ctx context.Context, gpuUUID string, ts config.TimeSlice) error {
	if t == nil || t.NvidiaSMI == "" {
		return fmt.Errorf("time slice of %s: nvidia-smi %w", gpuUUID, ErrNotConfigured)
	}
	return t.run(ctx, Command{Path: t.NvidiaSMI, Args: []string{"compute-policy", "-i", gpuUUID, "--set-timeslice", fmt.Sprint(int(ts))}})
}

// Daemon is one MPS control daemon: its directory, the devices it serves and its defaults.
type Daemon struct {
	// ID names the daemon (claim UID and config group).
	ID string
	// UUIDs are the GPU or MIG device UUIDs the daemon serves (CUDA_VISIBLE_DEVICES).
	UUIDs []string
	// ActiveThreadPercentage, when set, is the clients' default active thread percentage.
	ActiveThreadPercentage *int
	// PinnedLimits are the default pinned device memory limits by UUID ("<MiB>M").
	PinnedLimits map[string]string
	// MultiUser starts the daemon in multi-user mode (-M).
	MultiUser bool
}

// Dir is the daemon's directory under root.
func (d Daemon) Dir(root string) string { return filepath.Join(root, d.ID) }

// PipeDir is the daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY) on the host.
func (d Daemon) PipeDir(root string) string { return filepath.Join(d.Dir(root), "pipe") }

// LogDir is the daemon's log directory (CUDA_MPS_LOG_DIRECTORY) on the host.
func (d Daemon) LogDir(root string) string { return filepath.Join(d.Dir(root), "log") }

func (t *Tools) env(d Daemon) []string {
	return []string{
		"CUDA_VISIBLE_DEVICES=" + strings.Join(d.UUIDs, ","),
		"CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir(t.MPSRoot),
		"CUDA_MPS_LOG_DIRECTORY=" + d.LogDir(t.MPSRoot),
	}
}

// StartMPS starts the daemon and applies its defaults: the active thread percentage and the
// pinned memory limit of every device.
func (t *Tools) StartMPS(ctx context.Context, d Daemon) error {
	if t == nil || t.MPSControl == "" {
		return fmt.Errorf("MPS daemon %s: nvidia-cuda-mps-control %w", d.ID, ErrNotConfigured)
	}
	for _, dir := range []string{d.PipeDir(t.MPSRoot), d.LogDir(t.MPSRoot)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("MPS daemon %s: %w", d.ID, err)
		}
	}
	if t.Chroot != "" {
		// The daemon runs inside the driver root and must find its directories at the same path.
		if _, err := os.Stat(filepath.Join(t.Chroot, d.PipeDir(t.MPSRoot))); err != nil {
			return fmt.Errorf("MPS daemon %s: its pipe directory is not visible under the driver root %s (the driver root must be the host's /): %w", d.ID, t.Chroot, err)
		}
	}
	args := []string{"-d"}
	if d.MultiUser {
		args = append(args, "-M")
	}
	if err := t.run(ctx, Command{Path: t.MPSControl, Args: args, Env: t.env(d)}); err != nil {
		return fmt.Errorf("MPS daemon %s: start: %w", d.ID, err)
	}
	var cmds []string
	if d.ActiveThreadPercentage != nil {
		cmds = append(cmds, fmt.Sprintf("set_default_active_thread_percentage %d", *d.ActiveThreadPercentage))
	}
	uuids := make([]string, 0, len(d.PinnedLimits))
	for u := range d.PinnedLimits {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	for _, u := range uuids {
		cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %s %s", u, d.PinnedLimits[u]))
	}
	for _, c := range cmds {
		if err := t.run(ctx, Command{Path: t.MPSControl, Env: t.env(d), Stdin: c + "\n"}); err != nil {
			return fmt.Errorf("MPS daemon %s: %w", d.ID, err)
		}
	}
	return nil
}

// MPSRunning asks the daemon for its server list: an error means it does not answer.
func (t *Tools) MPSRunning(ctx context.Context, d Daemon) error {
	if t == nil || t.MPSControl == "" {
		return fmt.Errorf("MPS daemon %s: nvidia-cuda-mps-control %w", d.ID, ErrNotConfigured)
	}
	return t.run(ctx, Command{Path: t.MPSControl, Env: t.env(d), Stdin: "get_server_list\n"})
}

// StopMPS tells the daemon to quit and removes its directory. A daemon that does not answer is
// logged, not an error: it is gone with its directory either way.
func (t *Tools) StopMPS(ctx context.Context, d Daemon) error {
	if t == nil || t.MPSRoot == "" {
		return nil
	}
	if t.MPSControl != "" {
		if err := t.run(ctx, Command{Path: t.MPSControl, Env: t.env(d), Stdin: "quit\n"}); err != nil {
			klog.FromContext(ctx).Info("MPS daemon did not answer quit", "daemon", d.ID, "err", err)
		}
	}
	if err := os.RemoveAll(d.Dir(t.MPSRoot)); err != nil {
		return fmt.Errorf("MPS daemon %s: %w", d.ID, err)
	}
	return nil
}

// DaemonIDs lists the daemon directories under the root (for start-up cleanup).
func (t *Tools) DaemonIDs() ([]string, error) {
	if t == nil || t.MPSRoot == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(t.MPSRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("MPS root %s: %w", t.MPSRoot, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
