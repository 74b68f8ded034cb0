package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// The routing targets, judged on the model replay of the gateway's decisions against the greedy
// oracle's (cmd/gateway-bench/model.go) in every window.
const (
	targetTTFTVsOracle = 1.15 // gateway mean TTFT <= this x the oracle's
	targetHitVsOracle  = 0.95 // gateway hit rate >= this x the oracle's
	targetGapClosed    = 0.25 // gateway closes >= this share of least-request's gap to the oracle
)

// durations is a comma-separated list of durations (a flag).
type durations []time.Duration

func (d *durations) String() string {
	parts := make([]string, len(*d))
	for i, x := range *d {
		parts[i] = x.String()
	}
	return strings.Join(parts, ",")
}

func (d *durations) Set(s string) error {
	*d = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		x, err := time.ParseDuration(p)
		if err != nil || x < 0 {
			return fmt.Errorf("window start %q is not a non-negative duration", p)
		}
		*d = append(*d, x)
	}
	return nil
}

// windowResult is one trace window's replay.
type windowResult struct {
	start                  time.Duration
	label                  string // the trace window, as the report names it
	requests               int
	gateway, least, oracle *routingStats
	rule                   *routingStats // the gateway's rule in the model, with perfect information
	regret                 regret
	shifted                shifted // the gateway against the oracle at its own decision times
	gwErr                  error
}

// judgement is one window against the targets.
type judgement struct {
	ttftVsOracle, hitVsOracle, gapClosed float64
	ok                                   bool
}

// judge compares the model means (ms) and hit rates of the gateway, least-request and the
// oracle. gapClosed is the share of least-request's distance to the oracle that the gateway
// removes; when least-request is already at the oracle, it is 1 if the gateway is too, else 0.
func judge(gw, least, oracle, gwHit, oracleHit float64, errors int) judgement {
	j := judgement{ttftVsOracle: gw / oracle, hitVsOracle: gwHit / oracleHit}
	if gap := least - oracle; gap > 0 {
		j.gapClosed = (least - gw) / gap
	} else if gw <= least {
		j.gapClosed = 1
	}
	j.ok = errors == 0 && j.ttftVsOracle <= targetTTFTVsOracle && j.hitVsOracle >= targetHitVsOracle &&
		j.gapClosed >= targetGapClosed
	return j
}

func (o *options) runRouting(ctx context.Context) (verdict, error) {
	all := o.routing.policies
	var wins []*windowResult
	type window struct {
		trace string
		start time.Duration
	}
	todo := []window{{o.routing.trace, 0}}
	for _, s := range o.routing.extra {
		todo = append(todo, window{o.routing.trace, s})
	}
	if o.routing.heldout != "" {
		todo = append(todo, window{o.routing.heldout, 0})
	}
	for i, x := range todo {
		names := all
		if i > 0 { // the further windows run what the targets need
			names = []string{"gateway", policyLeast}
		}
		w, err := o.routingWindow(ctx, x.trace, x.start, names)
		if err != nil {
			return verdict{}, fmt.Errorf("window of %s from %s: %w", x.trace, x.start, err)
		}
		if w.gwErr != nil {
			return verdict{text: "routing: gateway absent (" + w.gwErr.Error() + ")"}, nil
		}
		wins = append(wins, w)
	}
	return summarize(os.Stdout, wins), nil
}

// summarize prints every window's judgement and returns the routing verdict.
func summarize(w io.Writer, wins []*windowResult) verdict {
	fmt.Fprintf(w, "\n== routing targets, model replay (mean TTFT <= %.2fx the greedy oracle's, hit rate >= %.2fx its, >= %.0f%% of least-request's gap to it closed)\n",
		targetTTFTVsOracle, targetHitVsOracle, 100*targetGapClosed)
	fmt.Fprintf(w, "%-30s %8s %11s %11s %11s %9s %9s %9s %9s %8s %11s  %s\n", "window", "requests", "gateway ms", "least ms",
		"oracle ms", "x oracle", "hit", "x oracle", "gap", "errors", "rule x orc", "gateway decisions vs the oracle's rule (model state)")
	ok := true
	var parts []string
	for _, x := range wins {
		gm, lm, om := mean(x.gateway.modelTTFTs), mean(x.least.modelTTFTs), mean(x.oracle.modelTTFTs)
		j := judge(gm, lm, om, x.gateway.modelHitRate, x.oracle.modelHitRate, x.gateway.errors)
		ok = ok && j.ok
		ruleRatio := math.NaN()
		if x.rule != nil {
			ruleRatio = mean(x.rule.modelTTFTs) / om
		}
		fmt.Fprintf(w, "%-30s %8d %11.1f %11.1f %11.1f %9.3f %9.4f %9.3f %8.0f%% %8d %11.3f  %s\n", x.label, x.requests,
			gm, lm, om, j.ttftVsOracle, x.gateway.modelHitRate, j.hitVsOracle, 100*j.gapClosed, x.gateway.errors, ruleRatio, x.regret)
		part := fmt.Sprintf("%s: %.3fx oracle TTFT, %.3fx its hit rate, %.0f%% of the gap closed", x.label,
			j.ttftVsOracle, j.hitVsOracle, 100*j.gapClosed)
		if d := x.regret.diag; !j.ok && d.seen > 0 && x.shifted.ok {
			part += fmt.Sprintf(" (missing: its decisions came %.1f ms after trace time; at its own decision times it is %.3fx the oracle; of its late decisions %d had the soonest pod over the load bound, %d misjudged a queue)",
				ms(d.lag)/float64(d.seen), x.shifted.gateway/x.shifted.oracle, d.bound, d.backlog)
		}
		parts = append(parts, part)
	}
	fmt.Fprintln(w, "(rule x orc: the gateway's soonest-first rule replayed in the model with exact, noise-free knowledge of every pod, over the oracle)")
	fmt.Fprintln(w, "why the gateway's decisions differ from the oracle's rule, per window (its logged view of each pod against the model's at the request's arrival):")
	for _, x := range wins {
		fmt.Fprintf(w, "  %s: %s\n", x.label, x.regret.diag)
		fmt.Fprintf(w, "  %s: %s\n", x.label, x.shifted)
		if x.shifted.ok {
			gm, om := mean(x.gateway.modelTTFTs), mean(x.oracle.modelTTFTs)
			fmt.Fprintf(w, "  %s: of the gateway's %.1f ms mean TTFT over the oracle's: %.1f ms remain with both at the gateway's decision times (its routing), %.1f ms are the timing (its decisions' delay and reordering behind the trace times)\n",
				x.label, gm-om, x.shifted.gateway-x.shifted.oracle, (gm-om)-(x.shifted.gateway-x.shifted.oracle))
		}
	}
	status := "met"
	if !ok {
		status = "MISSED"
	}
	return verdict{ok: ok, text: fmt.Sprintf("routing %s (model replay; targets <= %.2fx, >= %.2fx, >= %.0f%%): %s", status,
		targetTTFTVsOracle, targetHitVsOracle, 100*targetGapClosed, strings.Join(parts, "; "))}
}

// printKVIndex prints what the gateway's metrics say of its exact KV index after a replay.
func printKVIndex(admin string) {
	base := "http://" + admin
	exact, err1 := scrapeCounterLabel(base, "neuronetes_gateway_kv_index_endpoints", `mode="exact"`)
	approx, err2 := scrapeCounterLabel(base, "neuronetes_gateway_kv_index_endpoints", `mode="approximate"`)
	applied, _ := scrapeCounterLabel(base, "neuronetes_gateway_kv_events_total", `result="applied"`)
	gaps, _ := scrapeCounterLabel(base, "neuronetes_gateway_kv_events_total", `result="gap"`)
	if err1 != nil || err2 != nil {
		fmt.Printf("  gateway KV index: metrics not read (%v %v)\n", err1, err2)
		return
	}
	fmt.Printf("  gateway KV index: %.0f endpoints exact, %.0f approximate; %.0f event batches applied, %.0f sequence gaps\n",
		exact, approx, applied, gaps)
}
