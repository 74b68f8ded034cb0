package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// stepper advances a fake clock by 1 ms whenever something waits on it, until stopped.
func stepper(t *testing.T, fc *clocktesting.FakeClock) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if fc.HasWaiters() {
				fc.Step(time.Millisecond)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	t.Cleanup(func() { stop(); <-done })
}

// TestPrefixCacheShortensTTFT: with an injected clock, a conversation's next turn on the replica
// that served the previous one prefills only its new tokens; on a cold replica it prefills all.
func TestPrefixCacheShortensTTFT(t *testing.T) {
	ec := fastEngine()
	ec.PrefillRate, ec.DecodeRate = 1000, 1000 // 1 ms per prompt token and per output token
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	warmClock, coldClock := clocktesting.NewFakeClock(start), clocktesting.NewFakeClock(start)
	_, warm := newTestServer(t, ec, testConfig(), warmClock)
	_, cold := newTestServer(t, ec, testConfig(), coldClock)
	stepper(t, warmClock)
	stepper(t, coldClock)

	turn1 := strings.TrimSpace(strings.Repeat("plan the trip ", 66)) // 198 words + 2 markers = 200 tokens
	body1 := `{"max_tokens":4,"messages":[{"role":"user","content":"` + turn1 + `"}]}`
	resp := post(t, warm.URL+"/v1/chat/completions", body1, nil)
	if u := decodeUsage(t, resp.Body); u.PromptTokens != 200 || u.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("turn 1 usage %+v", u)
	}
	// Turn 2 repeats turn 1 and its answer: 200 + 4 + 1 + 9 + 1 = 215 tokens, of which the 12
	// full blocks of turn 1's prompt and answer (192 tokens) are cached on the warm replica.
	body2 := `{"max_tokens":4,"messages":[{"role":"user","content":"` + turn1 + `"},` +
		`{"role":"assistant","content":"tok0 tok1 tok2 tok3 "},{"role":"user","content":"and what should I pack for the rain there"}]}`
	tests := []struct {
		name       string
		url        string
		cached     int
		wantTTFTms float64
	}{
		{"same replica", warm.URL, 192, 23},
		{"other replica", cold.URL, 0, 215},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, tt.url+"/v1/chat/completions", body2, nil)
			u := decodeUsage(t, resp.Body)
			if u.PromptTokens != 215 || u.PromptTokensDetails.CachedTokens != tt.cached {
				t.Fatalf("usage %+v, want 215 prompt tokens, %d cached", u, tt.cached)
			}
			text := scrape(t, tt.url)
			sum, _ := metric(text, "vllm:time_to_first_token_seconds_sum")
			count, _ := metric(text, "vllm:time_to_first_token_seconds_count")
			last := sum * 1000
			if tt.url == warm.URL {
				last -= 200 // turn 1's TTFT
			}
			if count < 1 || last < tt.wantTTFTms-0.5 || last > tt.wantTTFTms+0.5 {
				t.Errorf("TTFT = %.1f ms, want %.0f ms (count %v)", last, tt.wantTTFTms, count)
			}
			hits, _ := metric(text, "vllm:prefix_cache_hits_total")
			if int(hits) != tt.cached {
				t.Errorf("vllm:prefix_cache_hits_total = %v, want %d", hits, tt.cached)
			}
		})
	}
}

// TestDisconnectAbortsAtOnce: a client that goes away mid-stream frees its slot immediately, and
// a request waiting for that slot starts.
func TestDisconnectAbortsAtOnce(t *testing.T) {
	ec := fastEngine()
	ec.Slots, ec.DecodeRate = 1, 20 // a 1000-token answer would take 50 s
	_, ts := newTestServer(t, ec, testConfig(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"long answer please"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q", line)
	}
	if v, _ := metric(scrape(t, ts.URL), "vllm:num_requests_running"); v != 1 {
		t.Fatalf("running = %v while streaming", v)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(time.Second)
	for {
		text := scrape(t, ts.URL)
		running, _ := metric(text, "vllm:num_requests_running")
		usage, _ := metric(text, "vllm:kv_cache_usage_perc")
		if running == 0 && usage == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("1 s after the disconnect: running=%v kv usage=%v", running, usage)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(scrape(t, ts.URL), `finished_reason="abort",model_name="m"} 1`) {
		t.Error("abort not counted in vllm:request_success_total")
	}
	next := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, nil)
	if next.StatusCode != 200 {
		t.Fatalf("next request after the abort: %d", next.StatusCode)
	}
}

func TestInjectedFailures(t *testing.T) {
	stream := `{"stream":true,"max_tokens":6,"messages":[{"role":"user","content":"x"}]}`
	plain := `{"max_tokens":6,"messages":[{"role":"user","content":"x"}]}`
	tests := []struct {
		mode   FailMode
		body   string
		status int
		check  func(t *testing.T, body string, readErr error)
	}{
		{FailStatus, plain, 500, func(t *testing.T, b string, _ error) {
			if !strings.Contains(b, `"type":"internal_error"`) {
				t.Errorf("body %s", b)
			}
		}},
		{FailMidstream, stream, 200, func(t *testing.T, b string, _ error) {
			if !strings.Contains(b, `"tok2 "`) || strings.Contains(b, `"tok3 "`) || !strings.Contains(b, `data: {"error":{`) ||
				!strings.HasSuffix(b, "data: [DONE]\n\n") {
				t.Errorf("stream %s", b)
			}
		}},
		{FailMidstream, plain, 500, func(t *testing.T, b string, _ error) {}},
		{FailDisconnect, stream, 200, func(t *testing.T, b string, err error) {
			if err == nil || !strings.Contains(b, `"tok2 "`) || strings.Contains(b, "[DONE]") {
				t.Errorf("want a cut stream after 3 tokens: err=%v body %s", err, b)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			sc := testConfig()
			sc.FailRate, sc.FailMode = 0.5, tt.mode
			_, ts := newTestServer(t, fastEngine(), sc, nil)
			var statuses []int
			for i := 0; i < 4; i++ {
				resp := post(t, ts.URL+"/v1/chat/completions", tt.body, nil)
				b, err := io.ReadAll(resp.Body)
				statuses = append(statuses, resp.StatusCode)
				if i%2 == 1 {
					if resp.StatusCode != tt.status {
						t.Fatalf("failed request %d: status %d", i, resp.StatusCode)
					}
					tt.check(t, string(b), err)
				} else if resp.StatusCode != 200 || err != nil || strings.Contains(string(b), "error") {
					t.Fatalf("request %d should succeed: %d %v %s", i, resp.StatusCode, err, b)
				}
			}
			text := scrape(t, ts.URL)
			if !strings.Contains(text, `neuronetes_demo_injected_failures_total{mode="`+string(tt.mode)+`"} 2`) {
				t.Errorf("injected failures not counted (statuses %v):\n%s", statuses, grep(text, "injected"))
			}
			if v, _ := metric(text, "vllm:num_requests_running"); v != 0 {
				t.Errorf("running = %v after failures", v)
			}
		})
	}
}

func TestToolCalls(t *testing.T) {
	sc := testConfig()
	sc.ToolCalls = true
	_, ts := newTestServer(t, fastEngine(), sc, nil)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",` +
		`"properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}},{"type":"function","function":{"name":"book"}}]`
	msgs := `"messages":[{"role":"user","content":"weather in Lisbon"}]`
	tests := []struct {
		name, body string
		status     int
		contains   []string
	}{
		{"whole", `{` + msgs + `,` + tools + `}`, 200, []string{`"finish_reason":"tool_calls"`, `"content":null`,
			`"name":"get_weather","arguments":"{\"city\":\"demo\",\"days\":1}"`}},
		{"streamed", `{"stream":true,` + msgs + `,` + tools + `}`, 200, []string{`"tool_calls":[{"index":0,"id":"chatcmpl-tool-`,
			`"function":{"name":"get_weather","arguments":""}`, `"function":{"arguments":"{\"ci"}`, `"finish_reason":"tool_calls"`}},
		{"named", `{"tool_choice":{"type":"function","function":{"name":"book"}},` + msgs + `,` + tools + `}`, 200,
			[]string{`"name":"book","arguments":"{}"`}},
		{"none", `{"tool_choice":"none","max_tokens":2,` + msgs + `,` + tools + `}`, 200, []string{`"content":"tok0 tok1 "`}},
		{"unknown name", `{"tool_choice":{"type":"function","function":{"name":"x"}},` + msgs + `,` + tools + `}`, 400,
			[]string{`"param":"tool_choice"`}},
		{"bad tool", `{` + msgs + `,"tools":[{"type":"function","function":{}}]}`, 400, []string{`"param":"tools[0]"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, ts.URL+"/v1/chat/completions", tt.body, nil)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			for _, c := range tt.contains {
				if !strings.Contains(string(b), c) {
					t.Errorf("body lacks %s:\n%s", c, b)
				}
			}
		})
	}
	// Off by default: tools are ignored and the answer is text.
	_, plain := newTestServer(t, fastEngine(), testConfig(), nil)
	resp := post(t, plain.URL+"/v1/chat/completions", `{"max_tokens":1,`+msgs+`,`+tools+`}`, nil)
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), `"content":"tok0 "`) {
		t.Errorf("tool call without --tool-calls: %s", b)
	}
}

// TestSidecarSessionMemory: with a sidecar, the stored turns come before the request's messages
// in the prompt, and each turn is stored.
func TestSidecarSessionMemory(t *testing.T) {
	var mu sync.Mutex
	turns := map[string][]map[string]string{}
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
			var m map[string]string
			_ = json.NewDecoder(r.Body).Decode(&m)
			turns[parts[0]] = append(turns[parts[0]], m)
			w.WriteHeader(http.StatusCreated)
		default:
			http.Error(w, "unexpected", http.StatusTeapot)
		}
	}))
	defer sc.Close()
	cfg := testConfig()
	cfg.SidecarURL = sc.URL
	_, ts := newTestServer(t, fastEngine(), cfg, nil)
	var got []usage
	for _, hdr := range []string{"X-Conversation-ID", "X-Session-ID"} {
		resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_tokens":2}`,
			map[string]string{hdr: "conv-1"})
		got = append(got, decodeUsage(t, resp.Body))
	}
	// Turn 1: <|user|> hello <|assistant|>; turn 2 adds the stored user and assistant turns.
	if got[0].ContextTokens != 3 || got[1].ContextTokens != 3+2+3 {
		t.Errorf("context tokens = %d, %d; want 3 and 8", got[0].ContextTokens, got[1].ContextTokens)
	}
	mu.Lock()
	defer mu.Unlock()
	conv := turns["conv-1"]
	if len(conv) != 4 || conv[0]["role"] != "user" || conv[1]["role"] != "assistant" || conv[1]["content"] != "tok0 tok1 " {
		t.Fatalf("stored turns = %+v", conv)
	}
}
