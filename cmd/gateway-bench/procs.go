package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// proc is a child process the bench started (benchproc.Proc), with what the bench keeps beside it.
type proc struct {
	*benchproc.Proc
	kv string // an agent's KV-event address host:port ("" when it publishes none)
	// admin is the gateway's admin host:port.
	admin string
}

// start runs bin with args, its output in logDir/name.log.
func start(name, logDir, addr, bin string, args ...string) (*proc, error) {
	return startEnv(name, logDir, addr, nil, bin, args...)
}

// startEnv is start with env added to the bench's own environment.
func startEnv(name, logDir, addr string, env []string, bin string, args ...string) (*proc, error) {
	p, err := benchproc.Start(name, logDir, addr, env, bin, args...)
	if err != nil {
		return nil, err
	}
	return &proc{Proc: p}, nil
}

// group is a set of processes stopped together.
type group []*proc

// procs is g as a benchproc.Group.
func (g group) procs() benchproc.Group {
	out := make(benchproc.Group, len(g))
	for i, p := range g {
		out[i] = p.Proc
	}
	return out
}

// stop stops each process in turn (benchproc.Group.Stop).
func (g group) stop() { g.procs().Stop() }

// cpu is the CPU seconds the processes have used so far, summed.
func (g group) cpu() float64 { return g.procs().CPU() }

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
		addr, err := benchproc.FreeAddr()
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
			if kv, err = benchproc.FreeAddr(); err != nil {
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
		if err := p.WaitHTTP("http://"+p.Addr+"/readyz", 20*time.Second); err != nil {
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
		out[i] = "http://" + p.Addr
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
