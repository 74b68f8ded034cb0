// Command gputools is a recording stand-in for nvidia-smi and nvidia-cuda-mps-control where no GPU
// exists: the driver runs it by path (--nvidia-smi, --mps-control) like the real tools. Every
// call is appended as a JSON line to calls.log next to the binary, so e2e tests can check the
// exact arguments. As nvidia-cuda-mps-control it behaves like the daemon in what the driver and
// containers can observe: `-d` starts a background daemon that creates its control pipe in
// CUDA_MPS_PIPE_DIRECTORY and a log in CUDA_MPS_LOG_DIRECTORY, refuses a second daemon on the same
// pipe directory, and client calls send their standard input to it and wait for its answer
// ("quit" stops it); a client finds no daemon with "Cannot find MPS control daemon process".
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Call is one recorded call (or daemon event).
type Call struct {
	Tool  string            `json:"tool"`
	Args  []string          `json:"args,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Stdin string            `json:"stdin,omitempty"`
	// Event is set for daemon records: started, command, exited.
	Event string    `json:"event,omitempty"`
	PID   int       `json:"pid"`
	Time  time.Time `json:"time"`
}

const daemonEnv = "GPUTOOLS_DAEMON"

func main() {
	tool := filepath.Base(os.Args[0])
	var err error
	switch {
	case os.Getenv(daemonEnv) == "1":
		err = daemon()
	case tool == "nvidia-smi":
		err = record(Call{Tool: tool, Args: os.Args[1:]})
		if err == nil && len(os.Args) > 1 && os.Args[1] == "compute-policy" {
			fmt.Println("Set compute policy (stand-in)")
		}
	case tool == "nvidia-cuda-mps-control":
		err = mpsControl(os.Args[1:])
	default:
		err = fmt.Errorf("run me as nvidia-smi or nvidia-cuda-mps-control, not %s", tool)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// record appends c to calls.log next to the binary.
func record(c Call) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	c.PID, c.Time = os.Getpid(), time.Now().UTC()
	c.Env = map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "CUDA_") {
			c.Env[k] = v
		}
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(filepath.Dir(exe), "calls.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append(raw, '\n'))
	return err
}

func dirs() (pipe, logDir string, err error) {
	pipe, logDir = os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if pipe == "" || logDir == "" {
		return "", "", fmt.Errorf("CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY must be set")
	}
	return pipe, logDir, nil
}

func pidFile(pipe string) string { return filepath.Join(pipe, "nvidia-cuda-mps-control.pid") }

// alive reports whether the daemon of the pipe directory runs (not a zombie).
func alive(pipe string) bool {
	raw, err := os.ReadFile(pidFile(pipe))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func mpsControl(args []string) error {
	pipe, _, err := dirs()
	if err != nil {
		return err
	}
	if len(args) > 0 && args[0] == "-d" {
		if err := record(Call{Tool: "nvidia-cuda-mps-control", Args: args}); err != nil {
			return err
		}
		if alive(pipe) {
			return fmt.Errorf("An instance of this daemon is already running")
		}
		return startDaemon(pipe)
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	if err := record(Call{Tool: "nvidia-cuda-mps-control", Args: args, Stdin: string(in)}); err != nil {
		return err
	}
	if !alive(pipe) {
		return fmt.Errorf("Cannot find MPS control daemon process")
	}
	if strings.TrimSpace(string(in)) == "get_server_list" {
		return nil // no server yet: no client has connected
	}
	f, err := os.OpenFile(filepath.Join(pipe, "control"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(in); err != nil {
		f.Close()
		return err
	}
	f.Close()
	// Like the real client, wait for the daemon's answer to every command sent.
	for _, line := range strings.Split(string(in), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		done := make(chan error, 1)
		go func() {
			r, err := os.Open(filepath.Join(pipe, "reply"))
			if err == nil {
				_, err = io.ReadAll(r)
				r.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("the MPS control daemon did not answer %q", strings.TrimSpace(line))
		}
	}
	if strings.TrimSpace(string(in)) == "quit" {
		for deadline := time.Now().Add(5 * time.Second); alive(pipe) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// startDaemon starts this binary as the daemon in a session of its own and returns once its
// control pipe exists.
func startDaemon(pipe string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Args[0] = "nvidia-cuda-mps-control"
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if alive(pipe) {
			if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
				return cmd.Process.Release()
			}
		}
	}
	return fmt.Errorf("daemon did not create its control pipe in %s", pipe)
}

// daemon serves the control pipe until it reads quit.
func daemon() error {
	pipe, logDir, err := dirs()
	if err != nil {
		return err
	}
	control, reply := filepath.Join(pipe, "control"), filepath.Join(pipe, "reply")
	for _, p := range []string{control, reply} {
		_ = os.Remove(p)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return err
		}
	}
	answer := func() {
		if w, err := os.OpenFile(reply, os.O_WRONLY, 0); err == nil {
			_, _ = w.Write([]byte("ok\n"))
			w.Close()
		}
	}
	logf, err := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Recorded before the pid file makes this daemon findable: a client (or the starter, which
	// returns once it is) must never record a call before the daemon's start.
	_ = record(Call{Tool: "mps-daemon", Event: "started"})
	if err := os.WriteFile(pidFile(pipe), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(logf, "[%s] daemon started\n", time.Now().UTC().Format(time.RFC3339))
	for {
		f, err := os.Open(control)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			_ = record(Call{Tool: "mps-daemon", Event: "command", Stdin: line})
			fmt.Fprintf(logf, "[%s] %s\n", time.Now().UTC().Format(time.RFC3339), line)
			if line == "quit" {
				f.Close()
				_ = os.Remove(control)
				_ = os.Remove(pidFile(pipe))
				_ = record(Call{Tool: "mps-daemon", Event: "exited"})
				answer()
				_ = os.Remove(reply)
				return nil
			}
			answer()
		}
		f.Close()
	}
}
