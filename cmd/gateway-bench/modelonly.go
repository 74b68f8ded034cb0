package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// runModel is `-only model`: every judged window (the default one, the further ones and the
// held-out trace's first) in the model alone, with no process started: the greedy oracle,
// least-request, the gateway's rule with perfect information and the gateway's own picker
// (pickerTTFTs), judged against the routing targets, with the picker's late decisions sorted by
// cause as the wall-clock replay sorts the gateway's. Deterministic; it judges the picker's
// decisions, not the machine's delay of them.
func (o *options) runModel(w io.Writer) (verdict, error) {
	c := o.routing
	type window struct {
		trace string
		start time.Duration
	}
	todo := []window{{c.trace, 0}}
	for _, s := range c.extra {
		todo = append(todo, window{c.trace, s})
	}
	if c.heldout != "" {
		todo = append(todo, window{c.heldout, 0})
	}
	policy := route.DefaultPolicy()
	if o.loadFactor >= 0 {
		policy.LoadFactor = o.loadFactor
	}
	fmt.Fprintf(w, "\n== routing in the model alone (the gateway's picker on the model's clock, load factor %g)\n", policy.LoadFactor)
	fmt.Fprintf(w, "%-30s %8s %10s %10s %10s %10s %9s %9s %9s %8s\n", "window", "requests", "picker ms", "least ms",
		"oracle ms", "rule ms", "x oracle", "hit x orc", "gap", "verdict")
	ok := true
	var parts, diags []string
	for _, x := range todo {
		rows, err := loadTrace(x.trace, x.start, c.window)
		if err != nil {
			return verdict{}, err
		}
		reqs := replay(rows, c.speedup, c.maxOutput)
		_, _, flags := c.podFlags(rows, o.pods)
		prep := prepare(reqs, c.blockSize)
		prompts, err := kvPrompts(reqs)
		if err != nil {
			return verdict{}, err
		}
		oracle, oHit, err := oracleTTFTs(prep, o.pods, flags)
		if err != nil {
			return verdict{}, err
		}
		least, _, err := leastTTFTs(prep, o.pods, flags)
		if err != nil {
			return verdict{}, err
		}
		rule, _, err := ruleTTFTs(prep, o.pods, flags)
		if err != nil {
			return verdict{}, err
		}
		st, err := pickerTTFTs(prep, prompts, o.pods, flags, policy, time.Unix(1_700_000_000, 0))
		if err != nil {
			return verdict{}, err
		}
		label := "+" + x.start.String()
		if x.trace != c.trace {
			label = "held-out " + strings.TrimSuffix(filepath.Base(x.trace), ".jsonl") + " " + label
		}
		j := judge(mean(st.modelTTFTs), mean(least), mean(oracle), st.modelHitRate, oHit, 0)
		ok = ok && j.ok
		word := "met"
		if !j.ok {
			word = "MISSED"
		}
		fmt.Fprintf(w, "%-30s %8d %10.1f %10.1f %10.1f %10.1f %9.3f %9.3f %8.0f%% %8s\n", label, len(reqs), mean(st.modelTTFTs),
			mean(least), mean(oracle), mean(rule), j.ttftVsOracle, j.hitVsOracle, 100*j.gapClosed, word)
		g := decisionRegret(prep, st.assign, o.pods, flags, st.views, st.start)
		diags = append(diags, fmt.Sprintf("  %s: %s\n  %s: %s", label, g, label, g.diag))
		parts = append(parts, fmt.Sprintf("%s %.3fx oracle, hit %.3fx, gap %.0f%%", label, j.ttftVsOracle, j.hitVsOracle, 100*j.gapClosed))
	}
	fmt.Fprintln(w, "why the picker's decisions differ from the oracle's rule (its view of each pod against the model's at the request's arrival):")
	fmt.Fprintln(w, strings.Join(diags, "\n"))
	status := "met"
	if !ok {
		status = "MISSED"
	}
	return verdict{ok: ok, text: fmt.Sprintf("routing in the model %s (the picker on the model's clock; targets <= %.2fx, >= %.2fx, >= %.0f%%): %s",
		status, targetTTFTVsOracle, targetHitVsOracle, 100*targetGapClosed, strings.Join(parts, "; "))}, nil
}
