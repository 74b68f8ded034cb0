package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestServer(t *testing.T, sidecarURL string) (*server, *httptest.Server) {
	m := newAgentMetrics("m", "c")
	s := &server{eng: newEngine(engineConfig{tokenRate: 2000, maxRunning: 2}, m), m: m, model: "m"}
	if sidecarURL != "" {
		s.sidecar = newSidecarClient(sidecarURL, m)
	}
	s.ready.Store(true)
	ts := httptest.NewServer(s.routes())
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestCompletions(t *testing.T) {
	_, ts := newTestServer(t, "")
	tests := []struct {
		name, path, body string
		status           int
		contains         []string
	}{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi there"}],"max_tokens":3}`, 200,
			[]string{`"object":"chat.completion"`, `tok0 tok1 tok2`, `"prompt_tokens":2`}},
		{"completion", "/v1/completions", `{"prompt":"a b c","max_tokens":2}`, 200, []string{`"object":"text_completion"`, `"text":"tok0 tok1 "`}},
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`, 200,
			[]string{`data: {`, `"delta":{"content":"tok1 "}`, `data: [DONE]`}},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, []string{"messages must not be empty"}},
		{"bad json", "/v1/completions", `{`, 400, []string{"bad request body"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, ts.URL+tt.path, tt.body, nil)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, body %s", resp.StatusCode, b)
			}
			for _, c := range tt.contains {
				if !strings.Contains(string(b), c) {
					t.Errorf("body %s lacks %s", b, c)
				}
			}
		})
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
		"vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:e2e_request_latency_seconds_bucket",
		"neuronetes_ttft_seconds_bucket", "neuronetes_tokens_total", "neuronetes_tokens_per_second", "neuronetes_tokens_in_queue",
		"neuronetes_concurrent_sessions"} {
		if !strings.Contains(string(b), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(string(b), `vllm:generation_tokens_total{model_name="m"} 7`) {
		t.Errorf("generation tokens not counted:\n%s", grep(string(b), "generation_tokens"))
	}
}

func grep(s, sub string) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "\n")
}

func TestTTFTModel(t *testing.T) {
	e := newEngine(engineConfig{ttftBase: 50 * time.Millisecond, ttftPerQueued: 20 * time.Millisecond, ttftPer1kTokens: 10 * time.Millisecond}, newAgentMetrics("m", "c"))
	tests := []struct {
		ahead, ctx int
		want       time.Duration
	}{
		{0, 0, 50 * time.Millisecond}, {3, 0, 110 * time.Millisecond}, {0, 2000, 70 * time.Millisecond}, {2, 500, 95 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := e.ttftFor(tt.ahead, tt.ctx); got != tt.want {
			t.Errorf("ttftFor(%d, %d) = %v, want %v", tt.ahead, tt.ctx, got, tt.want)
		}
	}
}

func TestQueueCountsWaiting(t *testing.T) {
	e := newEngine(engineConfig{maxRunning: 1}, newAgentMetrics("m", "c"))
	if _, err := e.acquire(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		ahead, _ := e.acquire(t.Context(), 5)
		got <- ahead
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mu.Lock()
		w, q := e.waiting, e.queuedTokens
		e.mu.Unlock()
		if w == 1 && q == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second request never queued: waiting=%d tokens=%d", w, q)
		}
		time.Sleep(time.Millisecond)
	}
	e.release()
	if ahead := <-got; ahead != 0 {
		t.Errorf("ahead = %d, want 0 (first waiter)", ahead)
	}
	e.release()
}

func TestSidecarSessionMemory(t *testing.T) {
	var mu sync.Mutex
	turns := map[string][]chatMessage{}
	sc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/sessions/"), "/")
		switch {
		case r.Method == http.MethodGet && len(parts) == 1:
			if len(turns[parts[0]]) == 0 {
				http.NotFound(w, r)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"turns": turns[parts[0]]})
		case r.Method == http.MethodPost && len(parts) == 2 && parts[1] == "turns":
			var m chatMessage
			_ = json.NewDecoder(r.Body).Decode(&m)
			turns[parts[0]] = append(turns[parts[0]], m)
			w.WriteHeader(http.StatusCreated)
		default:
			http.Error(w, "unexpected", http.StatusTeapot)
		}
	}))
	defer sc.Close()
	_, ts := newTestServer(t, sc.URL)
	for i := 0; i < 2; i++ {
		resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_tokens":2}`,
			map[string]string{"X-Conversation-ID": "conv-1"})
		io.Copy(io.Discard, resp.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	got := turns["conv-1"]
	if len(got) != 4 || got[0].Role != "user" || got[1].Role != "assistant" || got[1].Content != "tok0 tok1 " {
		t.Fatalf("stored turns = %+v", got)
	}
}

func TestLoadWeights(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(p, make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	n, _, err := loadWeights(p)
	if err != nil || n != 3<<20 {
		t.Fatalf("loadWeights = %d, %v", n, err)
	}
	if _, _, err := loadWeights(p + ".missing"); err == nil {
		t.Fatal("missing weights loaded")
	}
}

func TestTokensPerSecondWindow(t *testing.T) {
	e := newEngine(engineConfig{}, newAgentMetrics("m", "c"))
	const now = 1000
	tests := []struct {
		name string
		at   int64
		n    int
	}{
		{"outside the window", now - 7, 500},
		{"two seconds ago", now - 2, 20},
		{"one second ago", now - 1, 30},
		{"current partial second", now, 1000},
	}
	for _, tt := range tests {
		e.countTokensAt(tt.at, tt.n)
	}
	if got := e.tokensPerSecondAt(now); got != 10 {
		t.Fatalf("tokensPerSecond = %v, want (20+30)/5 = 10", got)
	}
	if got := e.tokensPerSecondAt(now + 60); got != 0 {
		t.Fatalf("idle tokensPerSecond = %v, want 0", got)
	}
}
