// Command autoscale-sim replays LLM request traces against a replica model and
// compares NeuroNetes' autoscaler with the HPA, KEDA, Knative KPA, AIBrix APA and
// an oracle, printing a table per trace and writing an SVG plot per trace.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalesim"
)

func main() {
	var (
		traces   = flag.String("trace", "", "comma-separated trace files (.csv Azure, .jsonl Mooncake)")
		out      = flag.String("out", ".local/bench/autoscale", "directory for the SVG plots")
		maxDur   = flag.Duration("max-duration", 0, "replay only the first part of each trace (0: all)")
		prefill  = flag.Float64("prefill-tps", 2000, "prompt tokens/s one replica prefills")
		decode   = flag.Float64("decode-tps", 30, "generated tokens/s of one sequence")
		slots    = flag.Int("slots", 16, "sequences one replica holds")
		cold     = flag.Duration("cold-start", 60*time.Second, "replica cold start time")
		warmAct  = flag.Duration("warm-activation", 5*time.Second, "warm replica activation time")
		slo      = flag.Duration("ttft-slo", 2*time.Second, "TTFT budget over a request's unloaded prefill time")
		step     = flag.Duration("step", 100*time.Millisecond, "simulation step")
		warmup   = flag.Duration("warmup", 5*time.Minute, "initial part of each trace excluded from the evaluation of every policy")
		maxRep   = flag.Int("max-replicas", 64, "max replicas of every policy")
		util     = flag.Float64("target-utilization", 0.7, "baselines' per-pod concurrency target as a fraction of slots")
		prewarm  = flag.Float64("prewarm-percent", 0, "NeuroNetes warm pool in percent of max replicas (warmpool.Target, rounded up)")
		parallel = flag.Int("parallel", 2, "policies simulated at once")
		backlog  = flag.Float64("nn-backlog-slos", 1.5, "NeuroNetes tokens-in-queue target, in SLOs of one replica's prefill")
		tokUtil  = flag.Float64("nn-token-utilization", 0.9, "NeuroNetes tokens-per-second target as a fraction of prefill-tps")
		downPct  = flag.Float64("nn-scale-down-percent", 5, "NeuroNetes scale-down limit per 60 s, percent")
		downWin  = flag.Duration("nn-scale-down-window", 120*time.Second, "NeuroNetes scale-down stabilization window")
		horizon  = flag.Duration("nn-predictive-horizon", 3*time.Minute, "NeuroNetes trend forecaster horizon (predictive.horizonMinutes)")
		minConf  = flag.Float64("nn-min-confidence", 0.5, "NeuroNetes forecaster minConfidence")
		causal   = flag.Bool("causal-ref", true, "also search the oracle's rule fed only the past (a reference for what not knowing the future costs)")
		isoCost  = flag.Bool("iso-cost", true, "also re-run each baseline with its concurrency target lowered until it spends as much as NeuroNetes, and compare attainment at that cost")
	)
	flag.Parse()
	if *traces == "" {
		fmt.Fprintln(os.Stderr, "autoscale-sim: --trace is required")
		os.Exit(2)
	}
	m := scalesim.Model{PrefillTPS: *prefill, DecodeTPS: *decode, Slots: *slots, ColdStart: *cold, WarmActivation: *warmAct, SLO: *slo, Step: *step, Warmup: *warmup}
	cfg := scalesim.Config{MaxReplicas: *maxRep, TargetUtilization: *util, PrewarmPercent: *prewarm,
		Tune: scalesim.Tuning{BacklogSLOs: *backlog, TokenUtilization: *tokUtil, ScaleDownPercent: *downPct, ScaleDownWindow: *downWin,
			PredictiveHorizon: *horizon, MinConfidence: *minConf}}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "autoscale-sim: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("model: prefill %.0f tok/s, decode %.0f tok/s/seq, %d slots, cold start %s, warm activation %s, SLO: TTFT <= unloaded + %s, warm-up %s\n",
		m.PrefillTPS, m.DecodeTPS, m.Slots, m.ColdStart, m.WarmActivation, m.SLO, m.Warmup)
	failed := false
	for _, path := range strings.Split(*traces, ",") {
		tr, err := scalesim.LoadTrace(path, *maxDur)
		if err != nil {
			fmt.Fprintf(os.Stderr, "autoscale-sim: %v\n", err)
			failed = true
			continue
		}
		start := time.Now()
		oracle, curve := scalesim.BestOracle(tr, m, 0.99, cfg.MaxReplicas)
		pols := scalesim.All(m, cfg)
		res := make([]scalesim.Result, len(pols))
		sem := make(chan struct{}, max(*parallel, 1))
		var wg sync.WaitGroup
		var ref scalesim.CausalRef
		if *causal {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				ref = scalesim.BestCausal(tr, m, 0.99, cfg.MaxReplicas, scalesim.DefaultLookbacks)
			}()
		}
		for i, p := range pols {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				res[i] = scalesim.Run(tr, m, p, curve[0])
			}()
		}
		wg.Wait()
		nn := &res[0] // sim.All lists NeuroNetes first
		if nn.Policy != "neuronetes" {
			fmt.Fprintf(os.Stderr, "autoscale-sim: first policy is %q, not neuronetes\n", nn.Policy)
			os.Exit(1)
		}
		var iso map[string]scalesim.IsoCost
		if *isoCost {
			iso = scalesim.BestIsoCosts(tr, m, cfg, nn.ReplicaSeconds, curve[0], *parallel)
		}
		scalesim.WriteTable(os.Stdout, tr.Name, oracle, res, iso)
		if *causal {
			scalesim.WriteCausalRef(os.Stdout, tr.Name, oracle, ref, nn)
		}
		svg := filepath.Join(*out, tr.Name+".svg")
		if err := scalesim.WriteSVG(svg, fmt.Sprintf("%s: load and replicas", tr.Name), oracle, res); err != nil {
			fmt.Fprintf(os.Stderr, "autoscale-sim: %v\n", err)
			failed = true
		}
		fmt.Printf("(%s simulated in %s; plot %s)\n\n", tr.Name, time.Since(start).Round(time.Millisecond), svg)
	}
	if failed {
		os.Exit(1)
	}
}
