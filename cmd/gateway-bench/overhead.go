package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// overheadConfig shapes the overhead benchmark.
type overheadConfig struct {
	streams    int           // concurrent streamed requests, closed loop
	tokens     int           // max_tokens of each
	decodeRate float64       // tokens per second per stream at the agent
	window     time.Duration // measured time per column per round
	rounds     int           // columns run interleaved this many times
}

// column is one way of reaching the agents.
type column struct {
	name  string
	url   func(worker int) string // chat completions URL for a worker
	proxy *proc                   // the proxy process, nil for direct
}

// overheadStats accumulates one column over all rounds.
type overheadStats struct {
	ttfts    []float64 // ms
	chunks   int
	errors   int
	firstErr error
	elapsed  time.Duration // summed over rounds
	proxyCPU float64       // seconds
	allCPU   float64       // seconds, agents + proxy + bench
	// roundCPU is the proxy process's CPU per chunk (µs) in each round: the gateway's is judged
	// against ReverseProxy's of the same round, so a load change between rounds cancels.
	roundCPU []float64
	counters procCounters // the proxy process's, summed over the measured windows
	// byPod is the TTFTs (ms) by the pod the response named (X-Neuronetes-Pod: the gateway and
	// the bench's HTTP proxies set it); empty for a column whose responses name none.
	byPod map[string][]float64
	// spans are the requests that named their pod, with when they ran (joinedLoad).
	spans []span
}

func (s *overheadStats) throughput() float64 { return float64(s.chunks) / s.elapsed.Seconds() }

// overheadBody is a short chat request; the worker and sequence numbers keep prompts distinct.
func overheadBody(worker, seq, tokens int) []byte {
	return fmt.Appendf(nil, `{"model":"bench","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"hello from stream %d request %d"}]}`,
		tokens, worker, seq)
}

// runWindow runs cfg.streams closed-loop workers for window, worker w against cols[w%len(cols)]
// (its stats in sts[w%len(cols)], none when sts is nil), and waits for their last requests to
// finish.
func runWindow(ctx context.Context, cols []column, cfg overheadConfig, window time.Duration, sts []*overheadStats) {
	hc := newClient(cfg.streams)
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	var wg sync.WaitGroup
	begin := time.Now()
	stopAt := begin.Add(window)
	for w := 0; w < cfg.streams; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			col := cols[w%len(cols)]
			for seq := 0; time.Now().Before(stopAt) && ctx.Err() == nil; seq++ {
				t0 := time.Now()
				r := stream(ctx, hc, col.url(w), overheadBody(w, seq, cfg.tokens))
				t1 := time.Now()
				if sts == nil {
					continue
				}
				st := sts[w%len(cols)]
				mu.Lock()
				if r.err != nil {
					st.errors++
					if st.firstErr == nil {
						st.firstErr = r.err
					}
				} else {
					st.ttfts = append(st.ttfts, ms(r.ttft))
					if r.pod != "" {
						if st.byPod == nil {
							st.byPod = map[string][]float64{}
						}
						st.byPod[r.pod] = append(st.byPod[r.pod], ms(r.ttft))
						st.spans = append(st.spans, span{pod: r.pod, start: t0, end: t1})
					}
				}
				st.chunks += r.chunks
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, st := range sts {
		st.elapsed += time.Since(begin)
	}
}

// runOverhead measures every column in interleaved rounds and returns their stats in order. With
// a ReverseProxy and a gateway column (the last two), each round ends with a pair window that
// runs both at once, half the streams each, and returns their CPU per chunk there (ReverseProxy
// first): the two processes then meet the same machine load, which the sequential windows, a
// few seconds apart on a shared machine, cannot promise.
func runOverhead(ctx context.Context, cols []column, agents group, cfg overheadConfig, logw io.Writer) ([]*overheadStats, []*overheadStats) {
	stats := make([]*overheadStats, len(cols))
	for i := range stats {
		stats[i] = &overheadStats{}
	}
	var pair []*overheadStats
	if len(cols) == 4 {
		pair = []*overheadStats{{}, {}}
	}
	for round := 0; round < cfg.rounds; round++ {
		for i, col := range cols {
			n0, c0, e0 := len(stats[i].ttfts), stats[i].chunks, stats[i].elapsed
			measure(ctx, cols[i:i+1], agents, cfg, stats[i:i+1])
			fmt.Fprintf(logw, "  round %d %-22s %6d requests  %8.0f chunks/s  load %s\n", round+1, col.name,
				len(stats[i].ttfts)-n0, float64(stats[i].chunks-c0)/(stats[i].elapsed-e0).Seconds(), benchproc.LoadAvg())
		}
		if pair != nil {
			measure(ctx, cols[2:4], agents, cfg, pair)
			fmt.Fprintf(logw, "  round %d %-22s %6.1f vs %.1f µs/chunk (%.3fx)  load %s\n", round+1, "pair rp+gateway at once",
				pair[0].roundCPU[round], pair[1].roundCPU[round], pair[1].roundCPU[round]/pair[0].roundCPU[round], benchproc.LoadAvg())
		}
	}
	return stats, pair
}

// measure runs cols at once (worker w on cols[w%len]) for a warm-up second, then for the window,
// and adds each column's requests, chunks and proxy CPU to sts, one round.
func measure(ctx context.Context, cols []column, agents group, cfg overheadConfig, sts []*overheadStats) {
	runWindow(ctx, cols, cfg, time.Second, nil) // warm-up: connections and caches
	cpu0 := agents.cpu() + benchproc.SelfCPU()
	px0 := make([]float64, len(cols))
	k0 := make([]procCounters, len(cols))
	c0 := make([]int, len(cols))
	for i, col := range cols {
		if col.proxy != nil {
			px0[i], k0[i] = col.proxy.CPUSeconds(), countersOf(col.proxy.Pid())
		}
		c0[i] = sts[i].chunks
	}
	runWindow(ctx, cols, cfg, cfg.window, sts)
	shared := (agents.cpu() + benchproc.SelfCPU() - cpu0) / float64(len(cols))
	for i, col := range cols {
		st := sts[i]
		if col.proxy != nil {
			px := col.proxy.CPUSeconds() - px0[i]
			st.counters = st.counters.add(countersOf(col.proxy.Pid()).sub(k0[i]))
			st.proxyCPU += px
			st.allCPU += px
			st.roundCPU = append(st.roundCPU, 1e6*px/float64(max(st.chunks-c0[i], 1)))
		}
		st.allCPU += shared
	}
}

// overheadVerdict is the target check of the gateway column: its CPU per chunk against
// ReverseProxy's (the median over the rounds of the ratio in the pair windows, where both ran at
// once), its added TTFT p50 against the no-op relay's, and its added p99 (judged only on an idle
// machine).
type overheadVerdict struct {
	cpuRatio           float64 // gateway's CPU per chunk / ReverseProxy's in the pair windows, median of the rounds
	seqRatio           float64 // the same from the sequential windows (context: load moves between them)
	floorRatio         float64 // the TCP relay's CPU per chunk / ReverseProxy's, sequential windows
	addedP50, floorP50 float64 // ms over direct: gateway, TCP relay
	rpP50              float64 // ms over direct: ReverseProxy (context: the floor an HTTP proxy reaches)
	addedP99, ratio    float64 // ms over direct; throughput x direct (context)
	instrRatio         float64 // gateway's instructions per chunk / ReverseProxy's (largest of the runs; judged when counted)
	instrJudged        bool    // the CPU target was judged on instructions, not process CPU time
	load               float64 // 1-minute load average after the runs
	p99Judged          bool
	ok, present        bool
}

// pairedRatio is the median over rounds of a's CPU per chunk over b's in the same round.
func pairedRatio(a, b *overheadStats) float64 {
	var rs []float64
	for r := range min(len(a.roundCPU), len(b.roundCPU)) {
		if b.roundCPU[r] > 0 {
			rs = append(rs, a.roundCPU[r]/b.roundCPU[r])
		}
	}
	return quantile(rs, 0.5)
}

// judgeOverhead checks the targets; cols are direct, the TCP relay, ReverseProxy and the gateway,
// pair ReverseProxy and the gateway run at once. The CPU target is judged on instr, the
// instructions per chunk ratio, when it was counted (not NaN), else on the pair windows' process
// CPU time.
func judgeOverhead(stats, pair []*overheadStats, load, instr float64) overheadVerdict {
	direct, floor, rp, gw := stats[0], stats[1], stats[2], stats[3]
	d50, d99 := quantile(direct.ttfts, 0.5), quantile(direct.ttfts, 0.99)
	v := overheadVerdict{present: true, load: load,
		cpuRatio: pairedRatio(pair[1], pair[0]), seqRatio: pairedRatio(gw, rp), floorRatio: pairedRatio(floor, rp),
		addedP50: quantile(gw.ttfts, 0.5) - d50, floorP50: quantile(floor.ttfts, 0.5) - d50, rpP50: quantile(rp.ttfts, 0.5) - d50,
		addedP99: quantile(gw.ttfts, 0.99) - d99, ratio: gw.throughput() / direct.throughput(),
		p99Judged: load < 1, instrRatio: instr, instrJudged: !math.IsNaN(instr)}
	cpu := v.cpuRatio
	if v.instrJudged {
		cpu = instr
	}
	v.ok = gw.errors == 0 && pair[1].errors == 0 && cpu <= 1.0 && v.addedP50 <= v.floorP50+2 && (!v.p99Judged || v.addedP99 <= 2)
	return v
}

// ttftText is the TTFT p50 part of the verdict: the gateway's added p50 against the target, with
// ReverseProxy's beside it, and, when ReverseProxy misses the target too, that it does.
func (v overheadVerdict) ttftText() string {
	t := fmt.Sprintf("adds %+.2f ms TTFT p50 (target <= the TCP relay's %+.2f + 2; ReverseProxy adds %+.2f, the gateway %+.2f over it)",
		v.addedP50, v.floorP50, v.rpP50, v.addedP50-v.rpP50)
	if v.rpP50 > v.floorP50+2 {
		t += fmt.Sprintf(" [ReverseProxy misses the TTFT target too, by %.2f ms: the relay + 2 ms is below what an HTTP proxy process reaches in this run]",
			v.rpP50-v.floorP50-2)
	}
	return t
}

// printOverhead writes the table, one column per row.
func printOverhead(w io.Writer, cols []column, stats []*overheadStats) {
	direct := stats[0]
	d50, d99, dtp := quantile(direct.ttfts, 0.5), quantile(direct.ttfts, 0.99), direct.throughput()
	fmt.Fprintf(w, "%-22s %8s %6s %9s %9s %8s %8s %10s %7s %10s %10s  %s\n", "column", "requests", "errors", "TTFT p50", "TTFT p99",
		"+p50", "+p99", "chunks/s", "ratio", "proxy CPU", "all CPU", "proxy CPU by round")
	fmt.Fprintf(w, "%-22s %8s %6s %9s %9s %8s %8s %10s %7s %10s %10s  %s\n", "", "", "", "ms", "ms", "ms", "ms", "", "x direct",
		"µs/chunk", "µs/chunk", "µs/chunk")
	for i, col := range cols {
		s := stats[i]
		p50, p99, tp := quantile(s.ttfts, 0.5), quantile(s.ttfts, 0.99), s.throughput()
		fmt.Fprintf(w, "%-22s %8d %6d %9.2f %9.2f %+8.2f %+8.2f %10.0f %7.3f %10.1f %10.1f  %s\n", col.name, len(s.ttfts), s.errors,
			p50, p99, p50-d50, p99-d99, tp, tp/dtp, 1e6*s.proxyCPU/float64(max(s.chunks, 1)), 1e6*s.allCPU/float64(max(s.chunks, 1)),
			fmtRounds(s.roundCPU))
		if s.firstErr != nil {
			fmt.Fprintf(w, "    first error: %v\n", s.firstErr)
		}
		if len(s.byPod) > 0 {
			fmt.Fprintf(w, "    by pod (requests, TTFT p50 ms): %s\n", fmtByPod(s.byPod))
			fmt.Fprintf(w, "    load where it went: %s\n", fmtJoinedLoad(s.spans))
		}
	}
}

// fmtByPod is each pod's request count and TTFT p50, pods in name order.
func fmtByPod(m map[string][]float64) string {
	pods := make([]string, 0, len(m))
	for p := range m {
		pods = append(pods, p)
	}
	sort.Strings(pods)
	parts := make([]string, len(pods))
	for i, p := range pods {
		parts[i] = fmt.Sprintf("%s %d %.2f", p, len(m[p]), quantile(m[p], 0.5))
	}
	return strings.Join(parts, "; ")
}

func fmtRounds(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, " ")
}

// loadValue is the 1-minute load average (NaN when unreadable).
func loadValue() float64 {
	v, err := strconv.ParseFloat(benchproc.LoadAvg(), 64)
	if err != nil {
		return math.NaN()
	}
	return v
}
