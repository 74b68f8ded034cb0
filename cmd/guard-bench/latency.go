package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/guard"
	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// latencyTarget is the largest guarded/plain median latency ratio at 8 KiB.
const latencyTarget = 1.1

var sizes = []int{1 << 10, 8 << 10, 32 << 10}

// benchPolicy is the built-in chain the guarded gateway runs: the example policy without its
// remote Presidio check.
var benchPolicy = nnv1.GuardrailPolicy{
	TypeMeta: metav1TypeMeta(),
	Spec: nnv1.GuardrailPolicySpec{
		TargetRef: nnv1.PolicyTargetRef{Kind: "AgentPool", Name: "static"},
		Request: []nnv1.GuardrailCheck{
			{Name: "block-financial-and-secrets", Type: nnv1.GuardrailPII, Action: "block",
				PII: &nnv1.PIICheck{Entities: []string{"CREDIT_CARD", "IBAN_CODE", "US_SSN", "API_KEY", "PRIVATE_KEY"}}},
			{Name: "redact-contact", Type: nnv1.GuardrailPII, Action: "redact", PII: &nnv1.PIICheck{Entities: []string{"EMAIL_ADDRESS", "PHONE_NUMBER"}}},
			{Name: "jailbreak", Type: nnv1.GuardrailJailbreak, Action: "block"},
		},
		Response: []nnv1.GuardrailCheck{{Name: "redact-pii-in-answers", Type: nnv1.GuardrailPII, Action: "redact", PII: &nnv1.PIICheck{}}},
	},
}

// backend is a demo-agent configuration.
type backend struct {
	name string
	args []string
	n    func(size int) int
	gate bool // the verdict is taken on this backend
}

func latencyBench(agentBin, gatewayBin, logDir string, requests int) ([]string, bool, error) {
	policyFile := filepath.Join(logDir, "guard-bench-policy.yaml")
	b, err := yaml.Marshal(benchPolicy)
	if err != nil {
		return nil, false, err
	}
	if err := os.WriteFile(policyFile, b, 0o644); err != nil {
		return nil, false, err
	}
	backends := []backend{
		{name: "demo agent, model-server timing (prefill 20000 tok/s, first token +5ms, 1 output token)",
			args: []string{"--ttft-base=5ms"}, gate: true,
			n: func(size int) int { return max(40, requests*(1<<10)/size*2) }},
		{name: "instant backend (prefill 1e9 tok/s, no first-token delay): the gateway's own cost",
			args: []string{"--prefill-rate=1000000000", "--ttft-base=0s"}, n: func(int) int { return requests }},
	}
	var verdicts []string
	ok := true
	for _, be := range backends {
		v, pass, err := runBackend(be, agentBin, gatewayBin, logDir, policyFile)
		if err != nil {
			return nil, false, err
		}
		if be.gate {
			verdicts, ok = append(verdicts, v), pass
		}
	}
	chainCost()
	return verdicts, ok, nil
}

func runBackend(be backend, agentBin, gatewayBin, logDir, policyFile string) (string, bool, error) {
	agentAddr, err := benchproc.FreeAddr()
	if err != nil {
		return "", false, err
	}
	agent, err := benchproc.Start("guard-bench-agent", logDir, agentAddr, nil, agentBin, append([]string{"--listen=" + agentAddr, "--model=bench",
		"--token-rate=1000", "--max-running=4"}, be.args...)...)
	if err != nil {
		return "", false, err
	}
	defer agent.Stop()
	if err := agent.WaitHTTP("http://"+agentAddr+"/readyz", 30*time.Second); err != nil {
		return "", false, err
	}
	var urls [2]string
	for i, extra := range [][]string{nil, {"--guardrail-policy=" + policyFile}} {
		listen, err := benchproc.FreeAddr()
		if err != nil {
			return "", false, err
		}
		admin, err := benchproc.FreeAddr()
		if err != nil {
			return "", false, err
		}
		name := []string{"guard-bench-gateway-plain", "guard-bench-gateway-guarded"}[i]
		g, err := benchproc.Start(name, logDir, listen, nil, gatewayBin, append([]string{"--backends=http://" + agentAddr, "--static-model=bench",
			"--listen=" + listen, "--admin-listen=" + admin, "--scrape-interval=0s"}, extra...)...)
		if err != nil {
			return "", false, err
		}
		defer g.Stop()
		if err := g.WaitHTTP("http://"+admin+"/readyz", 30*time.Second); err != nil {
			return "", false, err
		}
		urls[i] = "http://" + listen + "/v1/chat/completions"
	}
	fmt.Printf("== guardrail latency: %s ==\n", be.name)
	fmt.Printf("%8s %8s %12s %12s %12s %12s %8s\n", "prompt", "requests", "plain p50", "guarded p50", "plain p90", "guarded p90", "ratio")
	verdict, pass := "", true
	hc := &http.Client{Timeout: time.Minute}
	for _, size := range sizes {
		n := be.n(size)
		var lat [2][]time.Duration
		for i := 0; i < n; i++ {
			prompt := fmt.Sprintf("request %d-%d. ", size, i) + prose(size)
			for k := 0; k < 2; k++ {
				which := (i + k) % 2 // alternate which gateway goes first
				d, err := send(hc, urls[which], prompt)
				if err != nil {
					return "", false, fmt.Errorf("%d KiB via %s: %w", size>>10, urls[which], err)
				}
				lat[which] = append(lat[which], d)
			}
		}
		p50 := [2]time.Duration{pct(lat[0], 0.5), pct(lat[1], 0.5)}
		ratio := float64(p50[1]) / float64(p50[0])
		fmt.Printf("%6dKiB %8d %12s %12s %12s %12s %8.3f\n", size>>10, n, round(p50[0]), round(p50[1]), round(pct(lat[0], 0.9)), round(pct(lat[1], 0.9)), ratio)
		if size == 8<<10 {
			pass = ratio <= latencyTarget
			verdict = fmt.Sprintf("%s guardrail latency at 8 KiB: %.3fx the gateway without guardrails, p50 %s vs %s (target <= %.1fx; %s)",
				mark(pass), ratio, round(p50[1]), round(p50[0]), latencyTarget, be.name)
		}
	}
	return verdict, pass, nil
}

func send(hc *http.Client, url, prompt string) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"model": "bench", "max_tokens": 1,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	start := time.Now()
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return d, nil
}

func pct(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func round(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// sentences are ordinary support-chat prose with numbers, dates and versions (no PII).
var sentences = []string{
	"Our deployment runs version 2.14.3 on 12 nodes since 2024-03-18, and the rollout finished at 14:32.",
	"Please summarise the quarterly report: revenue grew 7.5% to $1,245,000 while costs stayed flat.",
	"The pipeline failed at step 4 of 9 because the cache held 3.2 GB more than its limit of 16 GB.",
	"Can you explain why the latency p99 rose from 180 ms to 420 ms after the upgrade on Tuesday?",
	"Write a short poem about the harbour at dawn, with gulls, ropes and the smell of diesel.",
	"The invoice lists 24 items; items 3, 7 and 19 were delivered late and item 22 is missing.",
	"Translate the following paragraph into French and keep the product names unchanged.",
	"In 1969 the mission landed after 102 hours; the crew stayed 21 hours on the surface.",
	"Compare the two designs: the first uses 4 replicas with 2 GPUs each, the second 8 with one.",
	"Our team meets every Monday at 9:30 in room 4.12 to review open tickets and plan the week.",
}

// numberSentences are digit-heavy prose without PII (order and ticket numbers, dates,
// timestamps, amounts, builds, tables of numbers): phone candidates the recognizer must dismiss,
// its costly case.
var numberSentences = []string{
	"Order 48213377 shipped on 2024-11-02 14:05:31 for $1,204.50 (invoice 2024-001893).",
	"Ticket 558213 was reopened at 1733140800 by desk 4; see batch 2024/00817 of 12.11.2024.",
	"Rows 12 34 56 78 90 12 34 56 78 90 and 0301234567 0301234568 0301234569 were imported.",
	"The 4 812 items of lot 7730-2219 passed, build 10.0.19045.3693, serial 88120413377.",
}

func prose(n int) string { return fill(sentences, n) }

func fill(parts []string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(parts[i%len(parts)])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// chainCost prints the built-in request chain's own time per prompt size, in process.
func chainCost() {
	pol, err := guard.Compile("bench", &benchPolicy.Spec, guard.CompileOptions{})
	if err != nil {
		fmt.Println("chain cost: compile:", err)
		return
	}
	fmt.Println("== built-in request chain in process (pii block + pii redact + jailbreak), median of 200 ==")
	for _, size := range sizes {
		var ds []time.Duration
		for i := 0; i < 200; i++ {
			req := &guard.Request{Texts: []guard.Text{{Role: "user", Text: fmt.Sprintf("request %d. ", i) + prose(size)}}}
			s := time.Now()
			d := pol.Request.Run(context.Background(), req, guard.Audit{})
			ds = append(ds, time.Since(s))
			if d.Action != guard.Allow {
				fmt.Printf("  unexpected %s on benign prose: %s\n", d.Action, d.Reason)
			}
		}
		fmt.Printf("%6dKiB %12s\n", size>>10, round(pct(ds, 0.5)))
	}
	fmt.Println("== the same chain on digit-heavy prompts without PII (ids, dates, timestamps, tables of numbers), median of 200 ==")
	for _, size := range sizes {
		var ds []time.Duration
		for i := 0; i < 200; i++ {
			req := &guard.Request{Texts: []guard.Text{{Role: "user", Text: fmt.Sprintf("request %d. ", i) + fill(numberSentences, size)}}}
			s := time.Now()
			pol.Request.Run(context.Background(), req, guard.Audit{})
			ds = append(ds, time.Since(s))
		}
		fmt.Printf("%6dKiB %12s\n", size>>10, round(pct(ds, 0.5)))
	}
}

func metav1TypeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: nnv1.GroupVersion.String(), Kind: "GuardrailPolicy"}
}
