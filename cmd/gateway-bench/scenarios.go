package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// routingConfig shapes the routing-quality benchmark. Rates are given in trace time and scaled by
// the speedup, so the replay is the trace's workload on proportionally faster pods.
type routingConfig struct {
	trace       string
	heldout     string        // a second trace whose first window is judged too ("" none)
	window      time.Duration // of trace time replayed, from its start
	speedup     float64
	maxOutput   int
	kvTokens    int // per pod
	blockSize   int
	load        float64 // prefill utilization of the pods if nothing were cached and load were even
	decodeReal  float64 // tokens per second per sequence, trace time
	ttftBase    time.Duration
	slots       int
	policies    []string
	withGateway bool
	extra       durations // starts of the further windows
}

func (c *routingConfig) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.trace, "trace", "../shared/data/traces/mooncake_conversation_trace.jsonl", "routing: Mooncake trace (JSONL)")
	fs.StringVar(&c.heldout, "heldout-trace", "", "routing: a held-out Mooncake trace (JSONL) whose first window is judged as well, with the gateway and least-request")
	fs.DurationVar(&c.window, "trace-window", 20*time.Minute, "routing: trace time replayed, from its start")
	fs.Float64Var(&c.speedup, "speedup", 20, "routing: time compression of the replay")
	fs.IntVar(&c.maxOutput, "max-output", 32, "routing: cap on each request's output tokens (streamed chunks cost CPU the pods would not)")
	fs.IntVar(&c.kvTokens, "kv-tokens", 1<<20, "routing: KV cache tokens per pod (about an H200 serving an 8B model)")
	fs.IntVar(&c.blockSize, "block-size", 16, "routing: KV block size in tokens")
	fs.Float64Var(&c.load, "load", 0.8, "routing: prefill utilization the trace would put on the pods with no cache reuse (sets the prefill rate)")
	fs.Float64Var(&c.decodeReal, "decode-rate-trace", 30, "routing: decode tokens per second per sequence, in trace time")
	fs.DurationVar(&c.ttftBase, "ttft-base-trace", 20*time.Millisecond, "routing: first-token overhead, in trace time")
	fs.IntVar(&c.slots, "slots", 256, "routing: batch slots per pod")
	c.policies = []string{"gateway", policyRR, policyLeast, policyRandom, policyReference}
	fs.Func("routing-policies", "routing: comma-separated policies replayed in the default window (gateway and least-request, which the targets need, are always replayed; the further windows replay only them) (default \""+strings.Join(c.policies, ",")+"\")",
		func(v string) error {
			c.policies = []string{"gateway", policyLeast}
			for _, p := range strings.Split(v, ",") {
				switch p = strings.TrimSpace(p); p {
				case "", "gateway", policyLeast:
				case policyRR, policyRandom, policyReference:
					c.policies = append(c.policies, p)
				default:
					return fmt.Errorf("unknown policy %q", p)
				}
			}
			return nil
		})
	c.extra = durations{20 * time.Minute, 40 * time.Minute}
	fs.Var(&c.extra, "extra-windows", "routing: start offsets (trace time) of the further windows judged, each -trace-window long, comma-separated")
}

func (c *routingConfig) validate() error {
	switch {
	case !(c.speedup > 0), !(c.load > 0), !(c.decodeReal > 0):
		return errors.New("-speedup, -load and -decode-rate-trace must be positive")
	case c.maxOutput < 1, c.kvTokens < 1, c.blockSize < 1, c.slots < 1:
		return errors.New("-max-output, -kv-tokens, -block-size and -slots must be positive")
	case c.window <= 0:
		return errors.New("-trace-window must be positive")
	}
	return nil
}

func (o *options) runOverhead(ctx context.Context) (verdict, error) {
	cfg := o.overhead
	if o.instr.runs > 0 { // fail before the process-CPU windows, not after them
		if err := callgrindTools(); err != nil {
			return verdict{}, err
		}
	}
	agents, err := startAgents(ctx, o.agentBin, o.logDir, "overhead", o.pods, agentFlags{
		slots: cfg.streams, prefillRate: 1e9, decodeRate: cfg.decodeRate, kvTokens: 1 << 22, blockSize: 16})
	if err != nil {
		return verdict{}, err
	}
	defer agents.stop()
	backends := agents.urls()
	cols := []column{{name: "direct", url: func(w int) string { return backends[w%len(backends)] + "/v1/chat/completions" }}}
	rpTrace, gwTrace := o.traceFiles()
	var rp *proc
	for _, pc := range []struct{ name, policy string }{{"tcp-relay (floor)", policyTCP}, {"reverseproxy-rr", policyRR}} {
		var extra []string
		if pc.policy == policyRR && rpTrace != "" {
			extra = []string{"-trace-file=" + rpTrace}
		}
		p, err := o.startProxy("overhead-"+pc.policy, pc.policy, backends, extra...)
		if err != nil {
			return verdict{}, err
		}
		defer p.Stop()
		cols = append(cols, column{name: pc.name, url: constURL("http://" + p.Addr + "/v1/chat/completions"), proxy: p})
		rp = p
	}
	var gwExtra []string
	if gwTrace != "" {
		gwExtra = []string{"--debug-trace-file=" + gwTrace}
	}
	gw, gwErr := o.startGateway("overhead-gateway", backends, gwExtra...)
	if gwErr == nil {
		defer gw.Stop()
		cols = append(cols, column{name: "gateway", url: constURL("http://" + gw.Addr + "/v1/chat/completions"), proxy: gw})
	} else if !errors.Is(gwErr, errNoGateway) {
		return verdict{}, gwErr
	}
	load0 := loadValue()
	fmt.Printf("\n== overhead: %d concurrent streamed requests of %d tokens at %g tokens/s each, %d agents, %d rounds x %s per column (load average %.2f)\n",
		cfg.streams, cfg.tokens, cfg.decodeRate, o.pods, cfg.rounds, cfg.window, load0)
	stats, pair := runOverhead(ctx, cols, agents, cfg, os.Stdout)
	printOverhead(os.Stdout, cols, stats)
	if gwErr != nil {
		return verdict{text: "overhead: gateway absent (" + gwErr.Error() + ")"}, nil
	}
	traced := ""
	if rpTrace != "" {
		// The traces end when the processes do.
		rp.Stop()
		gw.Stop()
		var err error
		if traced, err = traceWaits(os.Stdout, rpTrace, gwTrace); err != nil {
			return verdict{}, err
		}
	}
	instr := math.NaN()
	var iv instrVerdict
	if o.instr.runs > 0 {
		var err error
		if iv, err = o.runInstructions(ctx, os.Stdout); err != nil {
			return verdict{}, fmt.Errorf("instruction count: %w", err)
		}
		instr = iv.ratio
	}
	v := judgeOverhead(stats, pair, load0, instr)
	fmt.Printf("floor: a no-op TCP relay process costs %.3fx ReverseProxy's CPU per chunk (median of the rounds) and adds %+.2f ms to TTFT p50\n",
		v.floorRatio, v.floorP50)
	judged := "judged"
	if v.instrJudged {
		judged = fmt.Sprintf("context at load average %.2f-%s; the instructions judge", load0, benchproc.LoadAvg())
	}
	fmt.Printf("CPU per chunk, gateway over ReverseProxy: %.3fx with both at once (pair windows, by round %s vs %s µs/chunk; %s), %.3fx in the sequential windows (context)\n",
		v.cpuRatio, fmtRounds(pair[1].roundCPU), fmtRounds(pair[0].roundCPU), judged, v.seqRatio)
	fmt.Printf("  per chunk in the pair windows: gateway %s; ReverseProxy %s\n",
		pair[1].counters.perChunk(pair[1].chunks), pair[0].counters.perChunk(pair[0].chunks))
	fmt.Printf("TTFT p50 in the pair windows (both at once, the same load; context): gateway %.2f ms, ReverseProxy %.2f ms (%+.2f)\n",
		quantile(pair[1].ttfts, 0.5), quantile(pair[0].ttfts, 0.5), quantile(pair[1].ttfts, 0.5)-quantile(pair[0].ttfts, 0.5))
	p99 := fmt.Sprintf("p99 %+.2f ms not judged: load average %.2f at the start >= 1", v.addedP99, load0)
	if v.p99Judged {
		p99 = fmt.Sprintf("p99 %+.2f ms (target <= 2, load average %.2f)", v.addedP99, load0)
	}
	status := "met"
	if !v.ok {
		status = "MISSED"
	}
	cpu := fmt.Sprintf("gateway CPU per chunk %.3fx ReverseProxy's with both at once (target <= 1.0; sequential %.3fx; the TCP relay floor %.3fx)",
		v.cpuRatio, v.seqRatio, v.floorRatio)
	if v.instrJudged {
		cpu = fmt.Sprintf("gateway instructions per chunk %.3fx ReverseProxy's (largest of %d callgrind runs; target <= 1.0; process CPU time %.3fx with both at once at load average %.2f, context)",
			v.instrRatio, len(iv.runs), v.cpuRatio, load0)
	}
	text := fmt.Sprintf("overhead %s: %s, %s, %s; throughput %.3fx direct", status, cpu, v.ttftText(), p99, v.ratio)
	if len(iv.runs) > 0 {
		r := iv.runs[0]
		text += fmt.Sprintf(" (per request, context: gateway %.0f vs ReverseProxy %.0f instructions, run 1)", r.gwReq, r.rpReq)
	}
	gp, go_ := joinedLoad(stats[3].spans)
	rpp, rpo := joinedLoad(stats[2].spans)
	text += fmt.Sprintf(" (pod load, sequential windows: a gateway request joins %.1f requests in flight on its pod, %.1f on each other pod; ReverseProxy %.1f and %.1f)",
		gp, go_, rpp, rpo)
	if traced != "" {
		text += " (" + traced + ")"
	}
	if v.instrJudged && v.instrRatio > 1 {
		text += " (instructions: " + instrWhy(iv.runs[0]) + ")"
	} else if !v.instrJudged && v.cpuRatio > 1 {
		text += " (CPU: " + cpuWhy(pair[1], pair[0]) + ")"
	}
	return verdict{ok: v.ok, text: text}, nil
}

// cpuWhy says where the gateway's CPU per chunk in the pair windows differs from ReverseProxy's.
func cpuWhy(gw, rp *overheadStats) string {
	g, r := gw.counters, rp.counters
	if !g.ok || !r.ok || gw.chunks == 0 || rp.chunks == 0 {
		return "per-process counters not read"
	}
	gn, rn := float64(gw.chunks), float64(rp.chunks)
	return fmt.Sprintf("the gateway spends %+.1f µs user and %+.1f µs system time per chunk more than ReverseProxy, with %+.2f reads, %+.2f writes and %+.2f context switches per chunk more",
		1e6*(g.user/gn-r.user/rn), 1e6*(g.sys/gn-r.sys/rn), g.reads/gn-r.reads/rn, g.writes/gn-r.writes/rn, g.ctxSwitches/gn-r.ctxSwitches/rn)
}

func constURL(u string) func(int) string { return func(int) string { return u } }

// routingWindow replays one window of trace, from start (trace time), through the given
// policies to fresh agents, prints its table and returns its results with the model oracle's.
func (o *options) routingWindow(ctx context.Context, trace string, start time.Duration, names []string) (*windowResult, error) {
	c := o.routing
	rows, err := loadTrace(trace, start, c.window)
	if err != nil {
		return nil, err
	}
	reqs := replay(rows, c.speedup, c.maxOutput)
	offered, prefillReal, flags := c.podFlags(rows, o.pods)
	blocks := c.kvTokens / c.blockSize
	prep := prepare(reqs, c.blockSize)
	shared, err := sharedCacheHitRate(prep, o.pods*blocks, c.blockSize)
	if err != nil {
		return nil, err
	}
	oracle, rule := &routingStats{}, &routingStats{}
	if oracle.modelTTFTs, oracle.modelHitRate, err = oracleTTFTs(prep, o.pods, flags); err != nil {
		return nil, err
	}
	if rule.modelTTFTs, rule.modelHitRate, err = ruleTTFTs(prep, o.pods, flags); err != nil {
		return nil, err
	}
	fmt.Printf("\n== routing: %d requests of %s (%s from %s, %.0f prompt tokens/s) replayed %gx faster to %d pods\n",
		len(reqs), filepath.Base(trace), c.window, start, offered, c.speedup, o.pods)
	fmt.Printf("   pods: prefill %.0f tokens/s (trace time; %.2f of them busy with no cache reuse), decode %g tokens/s/seq, KV cache %d tokens in %d-token blocks, outputs capped at %d tokens\n",
		prefillReal, c.load, c.decodeReal, c.kvTokens, c.blockSize, c.maxOutput)
	fmt.Printf("   shared-cache reference: one %d-block cache (the %d pods' total), every request in arrival order, finished before the next\n",
		o.pods*blocks, o.pods)

	w := &windowResult{start: start, requests: len(reqs), oracle: oracle, rule: rule, label: "+" + start.String()}
	if trace != c.trace {
		w.label = "held-out " + strings.TrimSuffix(filepath.Base(trace), ".jsonl") + " " + w.label
	}
	var stats []*routingStats
	var ran []string
	for _, name := range names {
		st, err := o.replayPolicy(ctx, name, flags, reqs, prep)
		if errors.Is(err, errNoGateway) {
			w.gwErr = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		stats = append(stats, st)
		ran = append(ran, name)
		fmt.Printf("  %-14s done: %d requests, load %s\n", name, len(st.ttfts), benchproc.LoadAvg())
		switch name {
		case "gateway":
			w.gateway = st
			w.regret = decisionRegret(prep, st.assign, o.pods, flags, st.views, st.start)
			if w.shifted, err = replayShifted(prep, st.assign, st.views, st.start, o.pods, flags); err != nil {
				return nil, err
			}
		case policyLeast:
			w.least = st
		}
	}
	printRouting(os.Stdout, ran, stats, shared, oracle, rule)
	return w, nil
}

// podFlags sets the agents' flags from a window's load: the prompt tokens it offers per second
// (trace time) and the prefill rate (trace time) that puts the pods at c.load with no cache reuse.
func (c routingConfig) podFlags(rows []traceRow, pods int) (offered, prefillReal float64, f agentFlags) {
	var promptTokens int
	for _, r := range rows {
		promptTokens += r.InputLength
	}
	span := time.Duration(rows[len(rows)-1].Timestamp-rows[0].Timestamp) * time.Millisecond
	offered = float64(promptTokens) / max(span.Seconds(), 1)
	prefillReal = offered / (float64(pods) * c.load)
	return offered, prefillReal, agentFlags{slots: c.slots, prefillRate: prefillReal * c.speedup, decodeRate: c.decodeReal * c.speedup,
		ttftBase: time.Duration(float64(c.ttftBase) / c.speedup), kvTokens: c.kvTokens, blockSize: c.blockSize}
}

// replayPolicy replays the trace through one policy to fresh agents (cold caches).
func (o *options) replayPolicy(ctx context.Context, name string, flags agentFlags, reqs []replayRequest, prep []prepared) (*routingStats, error) {
	if name == "gateway" && o.gatewayBin == "" {
		return nil, errNoGateway
	}
	flags.kvEvents = name == "gateway"
	agents, err := startAgents(ctx, o.agentBin, o.logDir, "routing-"+name, o.pods, flags)
	if err != nil {
		return nil, err
	}
	defer agents.stop()
	var front *proc
	if name == "gateway" {
		// Time-based settings keep their trace-time meaning: scrape as often, in trace time.
		scrape := time.Duration(float64(time.Second) / o.routing.speedup)
		front, err = o.startGateway("routing-gateway", agents.gatewayURLs(), "--scrape-interval="+scrape.String(),
			"--kv-events-hash=demo", "-v=5") // verbosity 5: each decision and what the picker saw
	} else {
		front, err = o.startProxy("routing-"+name, name, agents.urls(),
			fmt.Sprintf("-kv-tokens=%d", flags.kvTokens), fmt.Sprintf("-block-size=%d", flags.blockSize))
	}
	if err != nil {
		return nil, err
	}
	defer front.Stop()
	cpu0 := front.CPUSeconds()
	st := replayTrace(ctx, "http://"+front.Addr+"/v1/chat/completions", reqs)
	st.frontCPU = front.CPUSeconds() - cpu0
	if name == "gateway" {
		printKVIndex(front.admin)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := collectHits(agents, st); err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i, p := range agents {
		index[p.Addr] = i
	}
	assign := make([]int, len(reqs))
	unknown := 0
	for i, pod := range st.pods {
		if j, ok := index[pod]; ok {
			assign[i] = j
		} else {
			assign[i] = -1
			unknown++
		}
	}
	if unknown > st.errors {
		return nil, fmt.Errorf("%d responses did not name a known pod in X-Neuronetes-Pod (backends %v)", unknown-st.errors, agents.urls())
	}
	st.assign = assign
	if name == "gateway" {
		if st.views, err = readViews(front.Log, st.ids, index); err != nil {
			return nil, err
		}
	}
	st.modelTTFTs, st.modelHitRate, err = modelTTFTs(prep, assign, o.pods, flags)
	return st, err
}
