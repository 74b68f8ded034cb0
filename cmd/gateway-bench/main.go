// Command gateway-bench measures the NeuroNetes gateway against baselines measured in the same run
// (docs/demo-agent.md, "Gateway benchmarks"):
//
//   - overhead: concurrent streamed requests straight to demo agents, through a no-op TCP relay
//     (the floor any extra process puts on this machine), through Go's httputil.ReverseProxy with
//     round robin, and through the gateway: added TTFT p50/p99 and chunk throughput;
//   - routing quality: the Mooncake conversation trace replayed, time-compressed, through the
//     gateway and through round-robin, least-request and random proxies to fresh demo agents:
//     mean and p99 TTFT and prefix-cache hit rate, measured and in a model replay of each
//     policy's decisions, judged against a greedy oracle in the model in several windows.
//
// Every process (agents, proxies, gateway) runs as its own process on loopback. The verdict is
// printed last; the exit status is 1 when a target is missed or the gateway is absent.
//
// `gateway-bench proxy -policy P -listen A -backends U,U` is the baseline proxy process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/neuronetes/neuronetes/internal/benchproc"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "proxy" {
		if err := proxyMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "gateway-bench proxy:", err)
			os.Exit(2)
		}
		return
	}
	ok, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway-bench:", err)
		fmt.Println("VERDICT: FAIL (the benchmark could not run: " + err.Error() + ")")
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	only                  string
	agentBin, gatewayBin  string
	gatewayArgs, readyURL string
	logDir                string
	traceDir              string // overhead: execution traces of ReverseProxy and the gateway go here
	pods                  int
	loadFactor            float64 // -only model: the picker's load factor (< 0: the gateway's default)
	overhead              overheadConfig
	instr                 instrConfig
	routing               routingConfig
}

func parseOptions(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gateway-bench", flag.ContinueOnError)
	fs.StringVar(&o.only, "only", "", "run only overhead, instructions (the overhead's instruction count alone), routing, or model (the routing targets judged on the gateway's picker run in the model alone: no process, deterministic)")
	fs.Float64Var(&o.loadFactor, "model-load-factor", -1, "-only model: the picker's load factor (negative: the gateway's default)")
	fs.StringVar(&o.agentBin, "agent-bin", "", "demo-agent binary (required)")
	fs.StringVar(&o.gatewayBin, "gateway-bin", "", "gateway binary; without it the gateway column is missing and the verdict fails")
	fs.StringVar(&o.gatewayArgs, "gateway-args",
		"--listen={listen} --admin-listen={admin} --backends={backends} --max-body-bytes=67108864 --drain-delay=0s",
		"gateway arguments: {listen} is its API host:port, {admin} its admin host:port, {backends} the comma-separated agent base URLs")
	fs.StringVar(&o.readyURL, "gateway-ready", "http://{admin}/readyz", "gateway readiness URL")
	fs.StringVar(&o.traceDir, "trace-dir", "", "overhead: take a Go execution trace of ReverseProxy's process and the gateway's (--debug-trace-file) into this directory and print, per backend request, where each one's goroutines wait (tracing costs both CPU: the TTFTs of such a run are not comparable with an untraced run's)")
	fs.StringVar(&o.logDir, "logdir", "", "directory for the processes' logs (default: a temporary one)")
	fs.IntVar(&o.pods, "pods", 4, "demo agents")
	fs.IntVar(&o.overhead.streams, "streams", 200, "overhead: concurrent streamed requests")
	fs.IntVar(&o.overhead.tokens, "tokens", 100, "overhead: tokens per request")
	fs.Float64Var(&o.overhead.decodeRate, "decode-rate", 50, "overhead: tokens per second per stream")
	fs.DurationVar(&o.overhead.window, "window", 5*time.Second, "overhead: measured time per column per round")
	fs.IntVar(&o.overhead.rounds, "rounds", 5, "overhead: interleaved rounds (the CPU ratio is the median of the rounds)")
	fs.IntVar(&o.instr.runs, "instr-runs", 2, "overhead: runs of the instruction count (valgrind callgrind) that judges the gateway's CPU per chunk; 0: judged on process CPU time instead")
	fs.IntVar(&o.instr.requests, "instr-requests", 10, "instruction count: requests per phase through each proxy")
	fs.IntVar(&o.instr.short, "instr-short", 20, "instruction count: tokens per request in the short phase")
	fs.IntVar(&o.instr.long, "instr-long", 220, "instruction count: tokens per request in the long phase")
	fs.Float64Var(&o.instr.rate, "instr-rate", 200, "instruction count: the agent's tokens per second per stream")
	fs.DurationVar(&o.instr.phase, "instr-phase", 0, "instruction count: each phase's wall time (0: the long phase's streaming time x1.5 + 3s)")
	o.routing.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case o.agentBin == "" && o.only != "model":
		return nil, errors.New("-agent-bin is required")
	case o.only != "" && o.only != "overhead" && o.only != "instructions" && o.only != "routing" && o.only != "model":
		return nil, fmt.Errorf("-only %q is not overhead, instructions, routing or model", o.only)
	case o.instr.runs < 0 || o.instr.requests < 1 || o.instr.short < 1 || o.instr.long <= o.instr.short || !(o.instr.rate > 0):
		return nil, errors.New("-instr-runs must be >= 0, -instr-requests and -instr-short positive, -instr-long above -instr-short, -instr-rate positive")
	case o.only == "instructions" && o.instr.runs < 1:
		return nil, errors.New("-only instructions needs -instr-runs >= 1")
	case o.pods < 1:
		return nil, fmt.Errorf("-pods must be at least 1, got %d", o.pods)
	case o.overhead.streams < 1 || o.overhead.tokens < 1 || o.overhead.rounds < 1 || !(o.overhead.decodeRate > 0):
		return nil, errors.New("-streams, -tokens, -rounds and -decode-rate must be positive")
	}
	return o, o.routing.validate()
}

func run(args []string) (bool, error) {
	o, err := parseOptions(args)
	if err != nil {
		return false, err
	}
	if o.logDir == "" {
		if o.logDir, err = os.MkdirTemp("", "gateway-bench-"); err != nil {
			return false, err
		}
		defer os.RemoveAll(o.logDir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cores, _ := os.ReadFile("/proc/cpuinfo")
	fmt.Printf("gateway-bench: %d CPU cores, load average %s at start; client, proxies, gateway and %d agents share them\n",
		strings.Count(string(cores), "processor\t:"), benchproc.LoadAvg(), o.pods)

	var verdicts []string
	pass := true
	if o.only == "model" {
		v, err := o.runModel(os.Stdout)
		if err != nil {
			return false, fmt.Errorf("model: %w", err)
		}
		verdicts = append(verdicts, v.text)
		pass = v.ok
	}
	if o.only == "" || o.only == "overhead" {
		v, err := o.runOverhead(ctx)
		if err != nil {
			return false, fmt.Errorf("overhead: %w", err)
		}
		verdicts = append(verdicts, v.text)
		pass = pass && v.ok
	}
	if o.only == "instructions" {
		v, err := o.runInstructions(ctx, os.Stdout)
		if err != nil {
			return false, fmt.Errorf("instructions: %w", err)
		}
		ok := v.ratio <= 1.0
		text := fmt.Sprintf("overhead CPU %s: gateway instructions per chunk %.3fx ReverseProxy's (largest of %d runs; target <= 1.0)",
			map[bool]string{true: "met", false: "MISSED"}[ok], v.ratio, len(v.runs))
		if !ok {
			text += " (" + instrWhy(v.runs[0]) + ")"
		}
		verdicts = append(verdicts, text)
		pass = pass && ok
	}
	if o.only == "" || o.only == "routing" {
		v, err := o.runRouting(ctx)
		if err != nil {
			return false, fmt.Errorf("routing: %w", err)
		}
		verdicts = append(verdicts, v.text)
		pass = pass && v.ok
	}
	fmt.Printf("load average %s at the end\n", benchproc.LoadAvg())
	word := "PASS"
	if !pass {
		word = "FAIL"
	}
	fmt.Printf("VERDICT: %s (%s)\n", word, strings.Join(verdicts, "; "))
	return pass, nil
}

// verdict is one benchmark's line in the final verdict.
type verdict struct {
	ok   bool
	text string
}

// startProxy runs this binary's proxy mode.
func (o *options) startProxy(name, policy string, backends []string, extra ...string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"proxy", "-policy=" + policy, "-listen=" + addr, "-backends=" + strings.Join(backends, ",")}, extra...)
	p, err := start(name, o.logDir, addr, self, args...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitTCP(10 * time.Second); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// startGateway runs the gateway in its static-backends mode.
func (o *options) startGateway(name string, backends []string, extra ...string) (*proc, error) {
	if o.gatewayBin == "" {
		return nil, errNoGateway
	}
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	r := strings.NewReplacer("{listen}", addr, "{admin}", admin, "{backends}", strings.Join(backends, ","))
	p, err := start(name, o.logDir, addr, o.gatewayBin, append(strings.Fields(r.Replace(o.gatewayArgs)), extra...)...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitHTTP(r.Replace(o.readyURL), 30*time.Second); err != nil {
		p.Stop()
		return nil, err
	}
	p.admin = admin
	return p, nil
}
