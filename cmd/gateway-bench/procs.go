package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process the bench started; it dies with the bench (Pdeathsig).
type proc struct {
	name string
	addr string // host:port it serves on
	cmd  *exec.Cmd
	log  string // its output file
	done chan struct{}
	kv   string // an agent's KV-event address host:port ("" when it publishes none)
	// admin is the gateway's admin host:port.
	admin string
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start runs bin with args, its output in logDir/name.log.
func start(name, logDir, addr, bin string, args ...string) (*proc, error) {
	return startEnv(name, logDir, addr, nil, bin, args...)
}

// startEnv is start with env added to the bench's own environment.
func startEnv(name, logDir, addr string, env []string, bin string, args ...string) (*proc, error) {
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
	p := &proc{name: name, addr: addr, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// waitHTTP polls url until it answers 200, the process exits, or timeout passes.
func (p *proc) waitHTTP(url string, timeout time.Duration) error {
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
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready; its log %s:\n%s", p.name, p.log, tail(p.log))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s; its log %s:\n%s", p.name, url, timeout, p.log, tail(p.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitTCP waits until the process accepts connections.
func (p *proc) waitTCP(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it listened; its log %s:\n%s", p.name, p.log, tail(p.log))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %s:\n%s", p.name, p.addr, timeout, tail(p.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM, then SIGKILL after a grace period, and waits for the exit.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuSeconds is the user plus system CPU time the process has used so far.
func (p *proc) cpuSeconds() float64 { return cpuOf(p.cmd.Process.Pid) }

// cpuOf reads utime+stime of pid from /proc (0 when unreadable).
func cpuOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// selfCPU is the bench process's own CPU seconds.
func selfCPU() float64 { return cpuOf(os.Getpid()) }

// loadAvg is the 1-minute load average, for the report.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// group is a set of processes stopped together.
type group []*proc

func (g group) stop() {
	for _, p := range g {
		p.stop()
	}
}

func (g group) cpu() float64 {
	var s float64
	for _, p := range g {
		s += p.cpuSeconds()
	}
	return s
}

// agentFlags are the demo agent's flags for a scenario.
type agentFlags struct {
	slots       int
	prefillRate float64
	decodeRate  float64
	ttftBase    time.Duration
	kvTokens    int
	blockSize   int
	kvEvents    bool // publish KV-cache events (--kv-events-endpoint) on a port of their own
}

// startAgents runs n demo agents and waits until all are ready.
func startAgents(ctx context.Context, bin, logDir, tag string, n int, f agentFlags) (group, error) {
	var g group
	for i := 0; i < n; i++ {
		addr, err := freeAddr()
		if err != nil {
			g.stop()
			return nil, err
		}
		args := []string{"--listen=" + addr, "--model=bench", fmt.Sprintf("--max-running=%d", f.slots),
			fmt.Sprintf("--prefill-rate=%g", f.prefillRate), fmt.Sprintf("--token-rate=%g", f.decodeRate),
			"--ttft-base=" + f.ttftBase.String(), fmt.Sprintf("--kv-cache-tokens=%d", f.kvTokens),
			fmt.Sprintf("--block-size=%d", f.blockSize), "--max-body-bytes=67108864", "--drain-timeout=1s"}
		var kv string
		if f.kvEvents {
			if kv, err = freeAddr(); err != nil {
				g.stop()
				return nil, err
			}
			args = append(args, "--kv-events-endpoint=tcp://"+kv)
		}
		p, err := start(fmt.Sprintf("%s-agent%d", tag, i), logDir, addr, bin, args...)
		if err != nil {
			g.stop()
			return nil, err
		}
		p.kv = kv
		g = append(g, p)
	}
	for _, p := range g {
		if err := p.waitHTTP("http://"+p.addr+"/readyz", 20*time.Second); err != nil {
			g.stop()
			return nil, err
		}
	}
	if ctx.Err() != nil {
		g.stop()
		return nil, ctx.Err()
	}
	return g, nil
}

func (g group) urls() []string {
	out := make([]string, len(g))
	for i, p := range g {
		out[i] = "http://" + p.addr
	}
	return out
}

// gatewayURLs are the agents' base URLs for the gateway's --backends: with the port of their KV
// events when they publish them.
func (g group) gatewayURLs() []string {
	out := g.urls()
	for i, p := range g {
		if _, port, err := net.SplitHostPort(p.kv); err == nil {
			out[i] += "?kv-events-port=" + port
		}
	}
	return out
}

var errNoGateway = errors.New("no gateway binary given (-gateway-bin)")

// procCounters are a process's cumulative CPU and kernel activity, from /proc.
type procCounters struct {
	user, sys   float64 // CPU seconds
	reads       float64 // read-like system calls (syscr)
	writes      float64 // write-like system calls (syscw)
	ctxSwitches float64 // voluntary and involuntary, summed over its live threads
	ok          bool
}

// countersOf reads pid's counters (ok false when /proc cannot be read).
func countersOf(pid int) procCounters {
	var c procCounters
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return c
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return c
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	c.user, c.sys = ut/100, st/100
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return c
	}
	for _, l := range strings.Split(string(io), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		switch k {
		case "syscr":
			c.reads = x
		case "syscw":
			c.writes = x
		}
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				c.ctxSwitches += x
			}
		}
	}
	c.ok = true
	return c
}

// add is c + d, field by field.
func (c procCounters) add(d procCounters) procCounters {
	return procCounters{user: c.user + d.user, sys: c.sys + d.sys, reads: c.reads + d.reads, writes: c.writes + d.writes,
		ctxSwitches: c.ctxSwitches + d.ctxSwitches, ok: d.ok}
}

// sub is c - d, field by field.
func (c procCounters) sub(d procCounters) procCounters {
	return procCounters{user: c.user - d.user, sys: c.sys - d.sys, reads: c.reads - d.reads, writes: c.writes - d.writes,
		ctxSwitches: c.ctxSwitches - d.ctxSwitches, ok: c.ok && d.ok}
}

// perChunk formats c divided by chunks: user and system CPU in µs, system calls and context
// switches.
func (c procCounters) perChunk(chunks int) string {
	if !c.ok || chunks <= 0 {
		return "counters not read"
	}
	n := float64(chunks)
	return fmt.Sprintf("user %.1f µs + system %.1f µs, %.2f reads, %.2f writes, %.2f context switches",
		1e6*c.user/n, 1e6*c.sys/n, c.reads/n, c.writes/n, c.ctxSwitches/n)
}
