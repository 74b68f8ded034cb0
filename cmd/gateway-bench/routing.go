package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// routingStats is one policy's replay.
type routingStats struct {
	ttfts         []float64 // ms
	pods          []string  // per request: the backend that served it ("" when unknown)
	ids           []string  // per request: the X-Request-Id of its response ("" when unknown)
	start         time.Time // when the replay's trace time 0 was
	modelTTFTs    []float64 // ms, the model replay of the same assignment
	modelHitRate  float64
	errors        int
	firstErr      error
	hits, queries float64 // summed over the pods' prefix-cache counters
	perPod        []float64
	late          time.Duration // worst lag of a send behind its trace time
	assign        []int         // per request: the index of the agent that served it, -1 unknown
	frontCPU      float64       // CPU seconds of the gateway or proxy process during the replay
	views         []*view       // per request: what the gateway's picker saw (nil: not logged)
}

func (s *routingStats) hitRate() float64 {
	if s.queries == 0 {
		return 0
	}
	return s.hits / s.queries
}

// routingBody is a replayed request: the synthesized prompt as one user message.
func routingBody(r replayRequest) ([]byte, error) {
	return json.Marshal(map[string]any{
		"model": "bench", "stream": true, "max_tokens": r.output,
		"messages": []map[string]string{{"role": "user", "content": r.prompt()}},
	})
}

// replayTrace sends every request at its (compressed) arrival time to url, open loop.
func replayTrace(ctx context.Context, url string, reqs []replayRequest) *routingStats {
	st := &routingStats{pods: make([]string, len(reqs)), ids: make([]string, len(reqs))}
	hc := newClient(512)
	defer hc.CloseIdleConnections()
	// The bodies are built before the clock starts: synthesizing and encoding a prompt of
	// thousands of words at its send time would delay the send on a loaded machine.
	bodies := make([][]byte, len(reqs))
	bodyErrs := make([]error, len(reqs))
	for i, r := range reqs {
		bodies[i], bodyErrs[i] = routingBody(r)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	st.start = start
	for i, r := range reqs {
		if d := time.Until(start.Add(r.at)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return st
			}
		}
		if lag := time.Since(start.Add(r.at)); lag > st.late {
			st.late = lag
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := streamResult{err: bodyErrs[i]}
			if res.err == nil {
				res = stream(ctx, hc, url, bodies[i])
			}
			bodies[i] = nil // each goroutine owns its slot; freed as the replay goes
			mu.Lock()
			defer mu.Unlock()
			st.pods[i], st.ids[i] = res.pod, res.id
			if res.err != nil {
				st.errors++
				if st.firstErr == nil {
					st.firstErr = res.err
				}
				return
			}
			st.ttfts = append(st.ttfts, ms(res.ttft))
		}()
	}
	wg.Wait()
	return st
}

// scrapeCounter sums the samples of a metric on an agent's /metrics.
func scrapeCounter(base, name string) (float64, error) { return scrapeCounterLabel(base, name, "") }

// scrapeCounterLabel sums the samples of a metric whose line contains label (a `k="v"` pair;
// "" for all).
func scrapeCounterLabel(base, name, label string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") || !strings.Contains(l, label) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s on %s: %w", name, base, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("%s has no %s", base, name)
	}
	return sum, sc.Err()
}

// collectHits reads the prefix-cache counters of every agent into st.
func collectHits(agents group, st *routingStats) error {
	for _, base := range agents.urls() {
		h, err := scrapeCounter(base, "vllm:prefix_cache_hits_total")
		if err != nil {
			return err
		}
		q, err := scrapeCounter(base, "vllm:prefix_cache_queries_total")
		if err != nil {
			return err
		}
		st.hits += h
		st.queries += q
		st.perPod = append(st.perPod, q)
	}
	return nil
}

// printRouting writes the table; names[i] is stats[i]'s policy, shared the reference hit rate.
// oracle holds only the model columns of the greedy oracle. The "x RR" columns are NaN when round
// robin did not run (the further windows). The measured (wall-clock) columns are context: the
// targets are judged on the model columns (summarize).
// rule holds the model columns of the gateway's rule with perfect information (ruleTTFTs).
func printRouting(w io.Writer, names []string, stats []*routingStats, shared float64, oracle, rule *routingStats) {
	rrMean := math.NaN()
	for i, n := range names {
		if n == policyRR {
			rrMean = mean(stats[i].ttfts)
		}
	}
	rrModel := math.NaN()
	for i, n := range names {
		if n == policyRR {
			rrModel = mean(stats[i].modelTTFTs)
		}
	}
	fmt.Fprintf(w, "%-22s %8s %6s %10s %10s %10s %8s %9s %9s %8s | %10s %10s %8s %9s %16s  %s\n", "policy", "requests", "errors",
		"TTFT mean", "TTFT p50", "TTFT p99", "x RR", "hit rate", "x shared", "late", "model mean", "model p99", "x RR", "hit rate",
		"front CPU ms/req", "prompt tokens per pod")
	for i, n := range names {
		s := stats[i]
		m := mean(s.ttfts)
		mm := mean(s.modelTTFTs)
		fmt.Fprintf(w, "%-22s %8d %6d %10.1f %10.1f %10.1f %8.3f %9.4f %9.3f %8s | %10.1f %10.1f %8.3f %9.4f %16.2f  %s\n", n, len(s.ttfts),
			s.errors, m, quantile(s.ttfts, 0.5), quantile(s.ttfts, 0.99), m/rrMean, s.hitRate(), s.hitRate()/shared,
			s.late.Round(time.Millisecond), mm, quantile(s.modelTTFTs, 0.99), mm/rrModel, s.modelHitRate,
			1000*s.frontCPU/float64(max(len(s.ttfts)+s.errors, 1)), podShares(s.perPod))
		if s.firstErr != nil {
			fmt.Fprintf(w, "    first error: %v\n", s.firstErr)
		}
	}
	om := mean(oracle.modelTTFTs)
	fmt.Fprintf(w, "%-22s %8d %6s %10s %10s %10s %8s %9s %9s %8s | %10.1f %10.1f %8.3f %9.4f\n", "greedy oracle (model)",
		len(oracle.modelTTFTs), "", "", "", "", "", "", "", "", om, quantile(oracle.modelTTFTs, 0.99), om/rrModel, oracle.modelHitRate)
	rm := mean(rule.modelTTFTs)
	fmt.Fprintf(w, "%-22s %8d %6s %10s %10s %10s %8s %9s %9s %8s | %10.1f %10.1f %8.3f %9.4f\n", "gateway rule (model)",
		len(rule.modelTTFTs), "", "", "", "", "", "", "", "", rm, quantile(rule.modelTTFTs, 0.99), rm/rrModel, rule.modelHitRate)
	fmt.Fprintf(w, "%-22s %8s %6s %10s %10s %10s %8s %9.4f %9.3f\n", "shared cache (ref)", "", "", "", "", "", "", shared, 1.0)
	fmt.Fprintf(w, "(%s is this bench's own router, shown for what cache- and load-aware routing reaches here; the greedy oracle\n"+
		" sends each request, in the model, to the pod where its first token comes soonest given every pod's exact state; neither is a target)\n",
		policyReference)
	fmt.Fprintf(w, "(measured columns are wall-clock on this machine, load average %s now; the model columns replay each policy's decisions without CPU noise)\n", benchproc.LoadAvg())
}

// podShares formats each pod's share of the prompt tokens it was sent.
func podShares(q []float64) string {
	var total float64
	for _, x := range q {
		total += x
	}
	parts := make([]string, len(q))
	for i, x := range q {
		parts[i] = fmt.Sprintf("%.0f%%", 100*x/max(total, 1))
	}
	return strings.Join(parts, " ")
}
