package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
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
}

func (s *overheadStats) throughput() float64 { return float64(s.chunks) / s.elapsed.Seconds() }

// overheadBody is a short chat request; the worker and sequence numbers keep prompts distinct.
func overheadBody(worker, seq, tokens int) []byte {
	return fmt.Appendf(nil, `{"model":"bench","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"hello from stream %d request %d"}]}`,
		tokens, worker, seq)
}

// runWindow runs cfg.streams closed-loop workers against col for window and waits for their last
// requests to finish.
func runWindow(ctx context.Context, col column, cfg overheadConfig, window time.Duration, st *overheadStats) {
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
			for seq := 0; time.Now().Before(stopAt) && ctx.Err() == nil; seq++ {
				r := stream(ctx, hc, col.url(w), overheadBody(w, seq, cfg.tokens))
				if st == nil {
					continue
				}
				mu.Lock()
				if r.err != nil {
					st.errors++
					if st.firstErr == nil {
						st.firstErr = r.err
					}
				} else {
					st.ttfts = append(st.ttfts, ms(r.ttft))
				}
				st.chunks += r.chunks
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if st != nil {
		st.elapsed += time.Since(begin)
	}
}

// runOverhead measures every column in interleaved rounds and returns their stats in order.
func runOverhead(ctx context.Context, cols []column, agents group, cfg overheadConfig, logw io.Writer) []*overheadStats {
	stats := make([]*overheadStats, len(cols))
	for i := range stats {
		stats[i] = &overheadStats{}
	}
	for round := 0; round < cfg.rounds; round++ {
		for i, col := range cols {
			runWindow(ctx, col, cfg, time.Second, nil) // warm-up: connections and caches
			cpu0, px0 := agents.cpu()+selfCPU(), 0.0
			if col.proxy != nil {
				px0 = col.proxy.cpuSeconds()
			}
			n0, c0, e0 := len(stats[i].ttfts), stats[i].chunks, stats[i].elapsed
			runWindow(ctx, col, cfg, cfg.window, stats[i])
			if col.proxy != nil {
				px := col.proxy.cpuSeconds() - px0
				stats[i].proxyCPU += px
				stats[i].allCPU += px
			}
			stats[i].allCPU += agents.cpu() + selfCPU() - cpu0
			fmt.Fprintf(logw, "  round %d %-22s %6d requests  %8.0f chunks/s  load %s\n", round+1, col.name,
				len(stats[i].ttfts)-n0, float64(stats[i].chunks-c0)/(stats[i].elapsed-e0).Seconds(), loadAvg())
		}
	}
	return stats
}

// overheadVerdict is the target check of the gateway column against direct.
type overheadVerdict struct {
	addedP99, ratio float64
	ok              bool
}

// printOverhead writes the table and returns the gateway's verdict (ok false when absent).
func printOverhead(w io.Writer, cols []column, stats []*overheadStats, cfg overheadConfig) overheadVerdict {
	direct := stats[0]
	d50, d99, dtp := quantile(direct.ttfts, 0.5), quantile(direct.ttfts, 0.99), direct.throughput()
	fmt.Fprintf(w, "%-22s %8s %6s %9s %9s %8s %8s %10s %7s %10s %10s\n", "column", "requests", "errors", "TTFT p50", "TTFT p99",
		"+p50", "+p99", "chunks/s", "ratio", "proxy CPU", "all CPU")
	fmt.Fprintf(w, "%-22s %8s %6s %9s %9s %8s %8s %10s %7s %10s %10s\n", "", "", "", "ms", "ms", "ms", "ms", "", "x direct",
		"µs/chunk", "µs/chunk")
	var v overheadVerdict
	for i, col := range cols {
		s := stats[i]
		p50, p99, tp := quantile(s.ttfts, 0.5), quantile(s.ttfts, 0.99), s.throughput()
		fmt.Fprintf(w, "%-22s %8d %6d %9.2f %9.2f %+8.2f %+8.2f %10.0f %7.3f %10.1f %10.1f\n", col.name, len(s.ttfts), s.errors,
			p50, p99, p50-d50, p99-d99, tp, tp/dtp, 1e6*s.proxyCPU/float64(max(s.chunks, 1)), 1e6*s.allCPU/float64(max(s.chunks, 1)))
		if s.firstErr != nil {
			fmt.Fprintf(w, "    first error: %v\n", s.firstErr)
		}
		if strings.HasPrefix(col.name, "gateway") {
			v = overheadVerdict{addedP99: p99 - d99, ratio: tp / dtp}
			v.ok = s.errors == 0 && v.addedP99 <= 2 && v.ratio >= 0.9
		}
	}
	return v
}
