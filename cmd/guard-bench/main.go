// Command guard-bench measures the guardrails (hack/bench.d/75-guard.sh, docs/guardrails.md):
//
//  1. PII precision and recall per entity type on the labelled set of package evalset (Presidio-
//     research templates plus NeuroNetes decoys, values drawn from a seed printed in the output).
//     Target: >= 0.95 for the checksum-validated types (CREDIT_CARD, IBAN_CODE). Then on the
//     held-out set (testdata/heldout.jsonl). Targets: card recall >= 0.98 and phone recall >=
//     0.90 at precision no lower than before (0.969 and 0.983).
//  2. Request latency through cmd/gateway in static-backends mode to one demo agent, with the
//     built-in chain (--guardrail-policy) and without it, the two gateways measured in the same
//     run with their requests interleaved, for 1, 8 and 32 KiB prompts; plus the chain's own cost
//     in process. Target: median latency ratio <= 1.1 at 8 KiB.
//
// The verdict is printed last; the exit status is 1 when a target is missed.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	agentBin := flag.String("agent-bin", "", "demo-agent binary")
	gatewayBin := flag.String("gateway-bin", "", "gateway binary")
	templates := flag.String("templates", "gateway/guard/pii/evalset/testdata", "directory of the evaluation templates")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the PII evaluation values")
	samples := flag.Int("samples", 8000, "sentences in the PII evaluation")
	requests := flag.Int("requests", 150, "requests per prompt size and gateway")
	logDir := flag.String("logdir", os.TempDir(), "directory for the processes' logs")
	only := flag.String("only", "", "run one part: pii or latency")
	flag.Parse()

	var verdicts []string
	failed := false
	fmt.Printf("machine load at start: %s\n", loadavg())
	if *only == "" || *only == "pii" {
		v, ok, err := piiBench(*templates, *seed, *samples)
		if err != nil {
			fmt.Fprintln(os.Stderr, "guard-bench: pii:", err)
			os.Exit(2)
		}
		verdicts, failed = append(verdicts, v...), failed || !ok
	}
	if *only == "" || *only == "latency" {
		if *agentBin == "" || *gatewayBin == "" {
			fmt.Fprintln(os.Stderr, "guard-bench: --agent-bin and --gateway-bin are required for the latency part")
			os.Exit(2)
		}
		v, ok, err := latencyBench(*agentBin, *gatewayBin, *logDir, *requests)
		if err != nil {
			fmt.Fprintln(os.Stderr, "guard-bench: latency:", err)
			os.Exit(2)
		}
		verdicts, failed = append(verdicts, v...), failed || !ok
	}
	fmt.Printf("machine load at end: %s\n", loadavg())
	fmt.Println("== verdict ==")
	fmt.Println(strings.Join(verdicts, "\n"))
	if failed {
		fmt.Println("FAIL: a guardrail target was missed")
		os.Exit(1)
	}
	fmt.Println("PASS: every guardrail target met")
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
