package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// demoAgentPod is a bare demo-agent pod whose prefill is slow enough (5000 prompt tokens/s) that a
// cached prefix shows in TTFT, and whose decode is slow enough (200 tokens/s) that a stream can be
// cut in the middle.
const demoAgentPod = `
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  labels: {app: demo-agent-e2e}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: agent
    image: %[2]s
    imagePullPolicy: Never
    args: ["--listen=:8000", "--prefill-rate=5000", "--ttft-base=1ms", "--token-rate=200", "--max-running=4"]
`

// demoAgentPods starts the named demo-agent pods in a fresh namespace and returns their base URLs.
func demoAgentPods(t *testing.T, names ...string) map[string]string {
	t.Helper()
	e := requireEnv(t)
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	ns := e.Namespace(t, "demo-agent")
	var docs []string
	for _, n := range names {
		docs = append(docs, fmt.Sprintf(demoAgentPod, n, img))
	}
	e.Apply(t, ns, strings.Join(docs, "---\n"))
	urls := map[string]string{}
	for _, n := range names {
		p := e.WaitPodRunning(t, ns, n, 3*time.Minute)
		base := "http://" + net.JoinHostPort(p.Status.PodIP, "8000")
		Eventually(t, time.Minute, n+" /readyz", func() (bool, error) {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		urls[n] = base
	}
	return urls
}

// demoStream is one streamed chat completion as the client saw it.
type demoStream struct {
	ttft         time.Duration
	chunks       int
	cachedTokens int
}

// demoChat streams a chat completion with usage and measures TTFT at the client.
func demoChat(t *testing.T, base string, maxTokens int, msgs ...map[string]string) demoStream {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "demo-model", "stream": true, "max_tokens": maxTokens,
		"stream_options": map[string]bool{"include_usage": true}, "messages": msgs})
	start := time.Now()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", base, resp.StatusCode, b)
	}
	var s demoStream
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", line, err)
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			if s.chunks == 0 {
				s.ttft = time.Since(start)
			}
			s.chunks++
		}
		if chunk.Usage != nil {
			s.cachedTokens = chunk.Usage.Details.Cached
		}
	}
	if s.chunks != maxTokens {
		t.Fatalf("%s streamed %d tokens, want %d", base, s.chunks, maxTokens)
	}
	return s
}

// demoMetric sums the samples of a metric on an agent's /metrics.
func demoMetric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, l, err)
			}
			sum += v
		}
	}
	return sum
}

// TestDemoAgentPrefixCacheTTFT: the next turn of a conversation gets a much shorter TTFT on the
// pod that served the previous turn (its prompt is in that pod's prefix cache) than on another.
func TestDemoAgentPrefixCacheTTFT(t *testing.T) {
	urls := demoAgentPods(t, "agent-a", "agent-b")
	a, b := urls["agent-a"], urls["agent-b"]
	turn1 := strings.TrimSpace(strings.Repeat("tell me about the long history of Lisbon ", 250)) // 2000 words
	user1 := map[string]string{"role": "user", "content": turn1}
	first := demoChat(t, a, 8, user1)
	// The answer is "tok0 ... tok7 "; the next turn carries it, as an OpenAI client does.
	answer := map[string]string{"role": "assistant", "content": "tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 "}
	user2 := map[string]string{"role": "user", "content": "and what should I see there in two days of walking around the old town"}
	warm := demoChat(t, a, 8, user1, answer, user2)
	cold := demoChat(t, b, 8, user1, answer, user2)
	t.Logf("TTFT: turn 1 on a %s; turn 2 on a (warm) %s with %d cached tokens, on b (cold) %s with %d",
		first.ttft, warm.ttft, warm.cachedTokens, cold.ttft, cold.cachedTokens)
	// Turn 1 is <|user|> + 2000 words + <|assistant|> = 2002 tokens; with its 8-token answer it
	// fills 125 full 16-token blocks (2000 tokens). Turn 2 adds <|user|> + 15 words + <|assistant|>:
	// 2027 tokens.
	if warm.cachedTokens != 2000 || cold.cachedTokens != 0 {
		t.Fatalf("cached tokens: warm %d (want 2000), cold %d (want 0)", warm.cachedTokens, cold.cachedTokens)
	}
	// Cold prefill is 2027 tokens at 5000/s (405 ms); warm, 27 tokens (5 ms).
	if cold.ttft < 350*time.Millisecond || warm.ttft > cold.ttft/3 {
		t.Fatalf("TTFT warm %s, cold %s: want cold >= 350ms and warm < cold/3", warm.ttft, cold.ttft)
	}
	if hits := demoMetric(t, a, "vllm:prefix_cache_hits_total"); hits != 2000 {
		t.Errorf("agent-a vllm:prefix_cache_hits_total = %v, want 2000", hits)
	}
	if q := demoMetric(t, b, "vllm:prefix_cache_queries_total"); q != 2027 {
		t.Errorf("agent-b vllm:prefix_cache_queries_total = %v, want 2027", q)
	}
}

// TestDemoAgentAbortOnDisconnect: a client that goes away mid-stream frees the agent's slot at
// once: vllm:num_requests_running is back to 0 within 1 s.
func TestDemoAgentAbortOnDisconnect(t *testing.T) {
	base := demoAgentPods(t, "agent-c")["agent-c"]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"model":"demo-model","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"a long answer"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before a token: %v", err)
		}
		if strings.HasPrefix(line, "data: {") {
			break
		}
	}
	if r := demoMetric(t, base, "vllm:num_requests_running"); r != 1 {
		t.Fatalf("running = %v while streaming", r)
	}
	cancel()
	resp.Body.Close()
	gone := time.Now()
	for demoMetric(t, base, "vllm:num_requests_running") != 0 {
		if time.Since(gone) > time.Second {
			t.Fatal("vllm:num_requests_running still 1 a second after the client disconnected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("slot freed %s after the disconnect", time.Since(gone).Round(time.Millisecond))
	if u := demoMetric(t, base, "vllm:kv_cache_usage_perc"); u != 0 {
		t.Errorf("vllm:kv_cache_usage_perc = %v after the abort, want 0", u)
	}
	if gen := demoMetric(t, base, "vllm:generation_tokens_total"); gen >= 2000 {
		t.Errorf("the agent generated all %v tokens for a client that left", gen)
	}
}
