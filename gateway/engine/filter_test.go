package engine

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/guard"
	"github.com/neuronetes/neuronetes/gateway/guard/pii"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// guardHarness is a harness whose responses pass a real guardrail policy: e-mail addresses are
// redacted, card numbers block the answer.
func guardHarness(t *testing.T, b *backend) *harness {
	h := newHarness(t, b)
	pols := guard.NewPolicies()
	pols.Static = &guard.Policy{Name: "ns/p", Response: []guard.ResponseCheck{
		{Name: "mail", Type: "pii", Find: guard.PIIFinder(pii.New(pii.Options{Entities: []pii.Entity{pii.Email}})), Action: guard.Redact},
		{Name: "card", Type: "pii", Find: guard.PIIFinder(pii.New(pii.Options{Entities: []pii.Entity{pii.CreditCard}})), Action: guard.Block},
	}}
	h.e.Ext.Filters = []stage.ChunkFilter{&guard.Stage{Policies: pols}}
	return h
}

func answer(body string) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}
}

func streamRaw(chunks ...string) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			_, _ = w.Write([]byte("data: " + c + "\n\n"))
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}
}

// TestResponseGuardReadsEveryField checks that the response guardrails see reasoning, tool-call
// arguments (whole, and streamed in fragments that split the value) and logprobs, not only the
// content.
func TestResponseGuardReadsEveryField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		reply  func(http.ResponseWriter, *http.Request, map[string]any)
		want   []string // in the client's bytes
	}{
		{"whole tool call", false, answer(`{"id":"x","object":"chat.completion","model":"m","extra":1.0e2,"choices":[{"index":0,` +
			`"message":{"role":"assistant","content":null,"reasoning_content":"mail jane@example.com now",` +
			`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"send","arguments":"{\"to\":\"jane@example.com\"}"}}]},` +
			`"logprobs":{"content":[{"token":"jane@example.com","logprob":-0.1,"bytes":[106]}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`),
			[]string{`"extra":1.0e2`, `"id":"call_1"`, `"name":"send"`, `<EMAIL_ADDRESS>`, `"logprobs":null`}},
		{"whole clean answer keeps logprobs", false, answer(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":"hi"},"logprobs":{"content":[{"token":"hi","logprob":-0.1}]},"finish_reason":"stop"}]}`),
			[]string{`"token":"hi"`}},
		{"streamed tool call split", true, streamRaw(
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"send","arguments":""}}]},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"to\":\"jane@exa"}}]},"logprobs":{"content":[{"token":"jane@exa"}]},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"mple.com\"}"}}]},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`),
			[]string{`"id":"call_1"`, `"finish_reason":"tool_calls"`}},
		{"streamed reasoning split", true, streamRaw(
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"reasoning_content":"ask jane@"},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"reasoning_content":"example.com"},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}]}`),
			[]string{`done`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			h := guardHarness(t, b)
			b.set(tc.reply)
			s := h.do(context.Background(), anyone, nil, chat(tc.stream, ""))
			if s.err != nil {
				t.Fatal(s.err)
			}
			got := s.body + strings.Join(s.events, "\n")
			if strings.Contains(got, "jane@") || strings.Contains(got, "mple.com") {
				t.Fatalf("the address reached the client: %s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("response lacks %s: %s", w, got)
				}
			}
			if tc.stream && !strings.Contains(strings.ReplaceAll(got, `\"`, `"`), "<EMAIL_ADDRESS>") {
				t.Errorf("streamed value not redacted in place: %s", got)
			}
		})
	}
}

// TestBlockedAnswerIsContentFilter checks blocks are answered as OpenAI answers filtered
// completions (200, finish_reason content_filter) and, with BlockedAsError, as before.
func TestBlockedAnswerIsContentFilter(t *testing.T) {
	const card = "4111 1111 1111 1111"
	whole := answer(`{"id":"x","object":"chat.completion","created":5,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"card ` + card + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}}`)
	streamed := streamRaw(chunkJSON("card 4111 1111 ", ""), chunkJSON("1111 1111 ok", "stop"))
	for _, tc := range []struct {
		name     string
		stream   bool
		legacy   bool
		reply    func(http.ResponseWriter, *http.Request, map[string]any)
		body     string
		errCode  string
		wantBody []string
	}{
		{"whole", false, false, whole, chat(false, ""), "", []string{`"finish_reason":"content_filter"`, `"content":null`, `"completion_tokens":9`, `"object":"chat.completion"`}},
		{"streamed", true, false, streamed, chat(true, ""), "", []string{`"finish_reason":"content_filter"`}},
		{"whole legacy", false, true, whole, chat(false, ""), "response_blocked", nil},
		{"streamed legacy", true, true, streamed, chat(true, ""), "response_blocked", nil},
		{"request", false, false, nil, `{"model":"m","messages":[{"role":"user","content":"a forbidden thing"}]}`, "", []string{`"finish_reason":"content_filter"`, `"object":"chat.completion"`}},
		{"request streamed", true, false, nil, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a forbidden thing"}]}`, "",
			[]string{`"finish_reason":"content_filter"`, `"object":"chat.completion.chunk"`, `"usage":{"prompt_tokens":0`}},
		{"request legacy", false, true, nil, `{"model":"m","messages":[{"role":"user","content":"a forbidden thing"}]}`, "content_blocked", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			h := guardHarness(t, b)
			h.e.Ext.Stages = []stage.RequestStage{blocker{}}
			h.e.Cfg.BlockedAsError = tc.legacy
			if tc.reply != nil {
				b.set(tc.reply)
			}
			s := h.do(context.Background(), anyone, nil, tc.body)
			got := s.body + strings.Join(s.events, "\n")
			if strings.Contains(got, "4111") {
				t.Fatalf("the card reached the client: %s", got)
			}
			if tc.errCode != "" {
				if s.err == nil || *s.err.Body.Code != tc.errCode {
					t.Fatalf("legacy: error %v, want code %s", s.err, tc.errCode)
				}
				return
			}
			if s.err != nil {
				t.Fatalf("a block is not an error: %v", s.err)
			}
			if tc.stream && (!s.finished || !strings.HasSuffix(got, `}`)) {
				t.Fatalf("stream not ended with [DONE]: %v %s", s.finished, got)
			}
			for _, w := range tc.wantBody {
				if !strings.Contains(got, w) {
					t.Errorf("answer lacks %s: %s", w, got)
				}
			}
		})
	}
}
