package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startProcess starts name detached in its own session so that it outlives
// the caller, logs to Logs/name.log and records its pid in Run/name.pid.
func startProcess(p Paths, name string, env []string, bin string, args ...string) (int, error) {
	for _, d := range []string{p.Run, p.Logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if _, err := os.Stat(bin); err != nil {
		return 0, fmt.Errorf("%s binary %s is missing (run `make tools`): %w", name, bin, err)
	}
	logf, err := os.OpenFile(filepath.Join(p.Logs, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("opening %s log: %w", name, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "\n==== %s starting %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	cmd.Stdin = devnull
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	// The child is reaped by init once we exit; release our handle now.
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(pidFile(p, name), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return pid, fmt.Errorf("recording %s pid: %w", name, err)
	}
	return pid, nil
}

func pidFile(p Paths, name string) string { return filepath.Join(p.Run, name+".pid") }

// runningPid returns the pid recorded for name when that process is alive
// and still runs the expected binary.
func runningPid(p Paths, name string) (int, bool) {
	b, err := os.ReadFile(pidFile(p, name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if !alive(pid) {
		return pid, false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return pid, false
	}
	// The recorded binary is a symlink into .local/tools; compare resolved paths.
	want, _ := filepath.EvalSymlinks(p.Binary(binaryOf(name)))
	return pid, want == "" || strings.TrimSuffix(exe, " (deleted)") == want
}

// binaryOf maps a process name to its binary name.
func binaryOf(name string) string {
	if strings.HasPrefix(name, "kwok") {
		return "kwok"
	}
	return strings.TrimSuffix(name, secondNodeSuffix)
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return errors.Is(err, syscall.EPERM)
	}
	// A zombie is not alive.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// stopPid sends SIGTERM, waits up to grace, then SIGKILLs.
func stopPid(pid int, grace time.Duration) {
	if pid <= 0 || !alive(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && alive(pid); i++ {
		time.Sleep(20 * time.Millisecond)
	}
}

// stopProcess stops the process recorded for name and removes its pid file.
func stopProcess(p Paths, name string, grace time.Duration) {
	if pid, ok := runningPid(p, name); ok {
		stopPid(pid, grace)
	}
	_ = os.Remove(pidFile(p, name))
}

// logTail returns the last n lines of a component's log, for error messages.
func logTail(p Paths, name string, n int) string {
	b, err := os.ReadFile(filepath.Join(p.Logs, name+".log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procsUnder lists live pids whose executable lives below dir (resolved:
// a worktree's .local/tools may be a link to a shared one).
func procsUnder(dir string) []int {
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(exe, dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}

// devTools are binaries of the tools directory that no cluster runs: another
// checkout whose tools link here may be running them (helm template in a
// chart test), so cluster-down neither stops nor reports them.
var devTools = map[string]bool{"helm": true, "controller-gen": true}

// clusterProcs lists the running processes of the tools directory except
// the development tools: the cluster's components, shims and what they
// started.
func clusterProcs(p Paths) []int {
	var out []int
	for _, pid := range procsUnder(filepath.Join(p.Local, "tools")) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && devTools[filepath.Base(exe)] {
			continue
		}
		out = append(out, pid)
	}
	return out
}
