package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/demoagent/engine"
	"github.com/neuronetes/neuronetes/demoagent/tokenize"
)

// fastEngine decodes at 2000 tokens/s with a tiny prefill cost: HTTP tests in real time.
func fastEngine() engine.Config {
	return engine.Config{Slots: 2, BlockSize: 16, Blocks: 256, PrefixCaching: true, PrefillRate: 1e6, DecodeRate: 2000}
}

func testConfig() Config {
	return Config{Model: "m", AgentClass: "c", DefaultMaxTokens: 16, MaxBodyBytes: 1 << 20, FailMode: FailStatus}
}

func newTestServer(t *testing.T, ec engine.Config, sc Config, clk clock.Clock) (*Server, *httptest.Server) {
	t.Helper()
	if clk == nil {
		clk = clock.RealClock{}
	}
	eng, err := engine.New(ec, clk)
	if err != nil {
		t.Fatal(err)
	}
	go eng.Run(t.Context())
	s, err := New(sc, eng, clk)
	if err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
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
	_, ts := newTestServer(t, fastEngine(), testConfig(), nil)
	long := strings.Repeat("w ", 5000)
	tests := []struct {
		name, path, body string
		status           int
		contains         []string
		lacks            []string
	}{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi there"}],"max_tokens":3}`, 200,
			[]string{`"object":"chat.completion"`, `"content":"tok0 tok1 tok2 "`, `"prompt_tokens":4`, `"completion_tokens":3`, `"finish_reason":"length"`}, nil},
		{"content parts", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"a b"}]}],"max_tokens":1}`, 200,
			[]string{`"prompt_tokens":4`}, nil},
		{"max_completion_tokens", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":2}`, 200,
			[]string{`"completion_tokens":2`}, nil},
		{"completion", "/v1/completions", `{"prompt":"a b c","max_tokens":2}`, 200,
			[]string{`"object":"text_completion"`, `"text":"tok0 tok1 "`, `"prompt_tokens":3`}, nil},
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`, 200,
			[]string{`"delta":{"content":"tok0 ","role":"assistant"}`, `"delta":{"content":"tok1 "}`, `"finish_reason":"length"`, "data: [DONE]"},
			[]string{`"usage"`}},
		{"chat stream with usage", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, 200,
			[]string{`"choices":[],"created"`, `"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5`, "data: [DONE]"}, nil},
		{"completion stream", "/v1/completions", `{"prompt":"a","max_tokens":2,"stream":true}`, 200,
			[]string{`"text":"tok1 "`, "data: [DONE]"}, nil},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, []string{"messages must not be empty", `"param":"messages"`}, nil},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"robot","content":"x"}]}`, 400, []string{`"param":"messages[0].role"`}, nil},
		{"bad content", "/v1/chat/completions", `{"messages":[{"role":"user","content":{"x":1}}]}`, 400, []string{`"param":"messages[0].content"`}, nil},
		{"bad json", "/v1/completions", `{`, 400, []string{"not valid JSON"}, nil},
		{"missing prompt", "/v1/completions", `{"max_tokens":2}`, 400, []string{`"param":"prompt"`}, nil},
		{"zero max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, []string{`"param":"max_tokens"`}, nil},
		{"stream_options without stream", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400,
			[]string{`"param":"stream_options"`}, nil},
		{"over the context", "/v1/completions", `{"prompt":"` + long + `","max_tokens":2}`, 400,
			[]string{"maximum context length is 4096 tokens", `"param":"prompt"`}, nil},
		{"over the body limit", "/v1/completions", `{"prompt":"` + strings.Repeat("x", 1<<20) + `"}`, 413, []string{"over 1048576 bytes"}, nil},
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
					t.Errorf("body lacks %s:\n%s", c, b)
				}
			}
			for _, c := range tt.lacks {
				if strings.Contains(string(b), c) {
					t.Errorf("body has %s:\n%s", c, b)
				}
			}
		})
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric returns the value of the first sample line starting with name{ or name followed by a
// space, and whether there was one.
func metric(text, name string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			if v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

func TestMetricNames(t *testing.T) {
	_, ts := newTestServer(t, fastEngine(), testConfig(), nil)
	for i := 0; i < 2; i++ {
		resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"one two three"}],"max_tokens":3}`, nil)
		io.Copy(io.Discard, resp.Body)
	}
	text := scrape(t, ts.URL)
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:cache_config_info",
		"vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
		"vllm:request_queue_time_seconds_bucket", "vllm:request_prefill_time_seconds_bucket", "vllm:request_decode_time_seconds_bucket",
		"vllm:request_inference_time_seconds_bucket", "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
		"vllm:request_params_max_tokens_bucket", "vllm:request_success_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_total",
		"neuronetes_ttft_seconds_bucket", "neuronetes_tokens_total", "neuronetes_tokens_per_second", "neuronetes_tokens_in_queue",
		"neuronetes_concurrent_sessions"} {
		if _, ok := metric(text, name); !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if strings.Contains(text, "vllm:gpu_cache_usage_perc") {
		t.Error("/metrics exports the deprecated vllm:gpu_cache_usage_perc")
	}
	want := map[string]float64{
		"vllm:generation_tokens_total":    6,
		"vllm:prompt_tokens_total":        10, // 2 x (3 words + 2 role markers)
		"vllm:prefix_cache_queries_total": 10,
		"vllm:num_requests_running":       0,
		"vllm:kv_cache_usage_perc":        0,
	}
	for name, w := range want {
		if got, _ := metric(text, name); got != w {
			t.Errorf("%s = %v, want %v", name, got, w)
		}
	}
	if !strings.Contains(text, `vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2`) {
		t.Errorf("request_success not counted:\n%s", grep(text, "request_success"))
	}
	if !strings.Contains(text, `vllm:cache_config_info{block_size="16",enable_prefix_caching="true",engine="0",num_gpu_blocks="256"} 1`) {
		t.Errorf("cache_config_info:\n%s", grep(text, "cache_config_info"))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func decodeUsage(t *testing.T, r io.Reader) usage {
	t.Helper()
	var out struct {
		Usage usage `json:"usage"`
	}
	if err := json.NewDecoder(r).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Usage
}

func TestReadyz(t *testing.T) {
	s, ts := newTestServer(t, fastEngine(), testConfig(), nil)
	for _, ready := range []bool{false, true} {
		s.SetReady(ready)
		resp, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if (resp.StatusCode == 200) != ready {
			t.Errorf("ready=%v: /readyz %d", ready, resp.StatusCode)
		}
	}
}

// TestTextChunkMatchesEvent: the per-token fast path writes the same bytes as the general one.
func TestTextChunkMatchesEvent(t *testing.T) {
	for _, chat := range []bool{true, false} {
		for _, i := range []int{0, 3} {
			req := &completionRequest{Stream: true}
			gen := &generation{tokens: 5}
			fast, slow := httptest.NewRecorder(), httptest.NewRecorder()
			a := &responder{w: fast, req: req, chat: chat, gen: gen, id: "x-1", model: "m", created: 7}
			b := &responder{w: slow, req: req, chat: chat, gen: gen, id: "x-1", model: "m", created: 7}
			if err := a.textChunk(i); err != nil {
				t.Fatal(err)
			}
			var choice map[string]any
			if chat {
				delta := map[string]any{"content": tokenize.OutputToken(i)}
				if i == 0 {
					delta["role"] = "assistant"
				}
				choice = map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": nil}
			} else {
				choice = map[string]any{"index": 0, "text": tokenize.OutputToken(i), "logprobs": nil, "finish_reason": nil}
			}
			if err := b.event([]any{choice}, nil); err != nil {
				t.Fatal(err)
			}
			if fast.Body.String() != slow.Body.String() {
				t.Errorf("chat=%v token %d:\nfast %s\nslow %s", chat, i, fast.Body, slow.Body)
			}
		}
	}
}

// TestWholeResponseReportsTTFT: a non-streamed answer carries its first token's time in
// HeaderTTFT (what the gateway takes as its TTFT), a streamed one does not need it.
func TestWholeResponseReportsTTFT(t *testing.T) {
	_, ts := newTestServer(t, fastEngine(), testConfig(), nil)
	start := time.Now()
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, nil)
	elapsed := time.Since(start)
	v, err := strconv.ParseFloat(resp.Header.Get(HeaderTTFT), 64)
	if resp.StatusCode != 200 || err != nil || v <= 0 || v > elapsed.Seconds() {
		t.Fatalf("status %d, %s = %q (%v), want a TTFT within the %v the request took", resp.StatusCode, HeaderTTFT, resp.Header.Get(HeaderTTFT), err, elapsed)
	}
	stream := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`, nil)
	if stream.Header.Get(HeaderTTFT) != "" {
		t.Fatal("a stream reports a TTFT header; its first chunk is its TTFT")
	}
}
