// Package benchproc runs the child processes of the benchmark commands (cmd/gateway-bench,
// cmd/guard-bench, cmd/dispatch-bench): demo agents, the gateway, proxies, redis-server. A child
// writes its output to its own log file, dies with the bench (Pdeathsig SIGKILL), and a wait for
// it to listen fails early, with the log's tail, when it exits first. The package also reads the
// CPU time of a process and the machine's load average from /proc, for the benches' reports.
//
// It is Linux-only (Pdeathsig, /proc), as the benches are.
package benchproc

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultGrace is how long Stop waits after SIGTERM before it sends SIGKILL, when the Proc's
// Grace is zero.
const DefaultGrace = 5 * time.Second

// pollEvery is the pause between two readiness probes.
const pollEvery = 20 * time.Millisecond

// Proc is a child process a bench started; it dies with the bench (Pdeathsig SIGKILL).
type Proc struct {
	// Name names the process in errors and its log file (LogDir/Name.log).
	Name string
	// Addr is the host:port it serves on, the one WaitTCP dials ("" when it serves none).
	Addr string
	// Log is the path of the file that holds its standard output and error.
	Log string
	// Grace is how long Stop waits after SIGTERM before SIGKILL; zero means DefaultGrace.
	Grace time.Duration

	cmd  *exec.Cmd
	done chan struct{}
}

// FreeAddr returns a loopback address (127.0.0.1:port) with a port that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start runs bin with args as the process name, serving on addr ("" when it serves none), its
// standard output and error in logDir/name.log. env, when not nil, is added to the bench's own
// environment. The process gets SIGKILL when the bench dies.
func Start(name, logDir, addr string, env []string, bin string, args ...string) (*Proc, error) {
	if name == "" {
		return nil, errors.New("benchproc.Start: name is empty")
	}
	if bin == "" {
		return nil, fmt.Errorf("benchproc.Start %s: bin is empty", name)
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Proc{Name: name, Addr: addr, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// exited reports whether the process has exited.
func (p *Proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitHTTP polls url until it answers 200, the process exits, or timeout passes; the error of the
// last two carries the tail of the process's log.
func (p *Proc) WaitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready; its log %s:\n%s", p.Name, p.Log, Tail(p.Log))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s; its log %s:\n%s", p.Name, url, timeout, p.Log, Tail(p.Log))
		}
		time.Sleep(pollEvery)
	}
}

// WaitTCP waits until the process accepts connections on Addr, it exits, or timeout passes; the
// error of the last two carries the tail of the process's log.
func (p *Proc) WaitTCP(timeout time.Duration) error {
	if p.Addr == "" {
		return fmt.Errorf("%s: WaitTCP: Addr is empty", p.Name)
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it listened; its log %s:\n%s", p.Name, p.Log, Tail(p.Log))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %s; its log %s:\n%s", p.Name, p.Addr, timeout, p.Log, Tail(p.Log))
		}
		time.Sleep(pollEvery)
	}
}

// Stop sends SIGTERM, then SIGKILL once Grace (DefaultGrace when zero) has passed, and returns
// when the process has exited. Stopping a nil or exited Proc does nothing.
func (p *Proc) Stop() {
	if p == nil || p.exited() {
		return
	}
	grace := p.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill sends SIGKILL at once, for a crash the bench injects, and returns when the process has
// exited. Killing a nil or exited Proc does nothing.
func (p *Proc) Kill() {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// CPUSeconds is the user plus system CPU time the process has used so far (0 once it has exited).
func (p *Proc) CPUSeconds() float64 { return CPUOf(p.Pid()) }

// Group is a set of processes stopped together.
type Group []*Proc

// Stop stops each process in turn (Proc.Stop).
func (g Group) Stop() {
	for _, p := range g {
		p.Stop()
	}
}

// CPU is the CPU seconds the processes have used so far, summed.
func (g Group) CPU() float64 {
	var s float64
	for _, p := range g {
		s += p.CPUSeconds()
	}
	return s
}
