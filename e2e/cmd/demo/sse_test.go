package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReadSSE(t *testing.T) {
	chunk := func(s string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
	}
	usage := `data: {"id":"c1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"context_tokens":31,"prompt_tokens_details":{"cached_tokens":7}}}` + "\n\n"
	tests := []struct {
		name             string
		in               string
		content          string
		chunks           int
		context, cached  int
		noUsage, noFirst bool
		err              error  // errors.Is
		errText          string // substring
	}{
		{name: "chunks, usage, done", in: chunk("tok0 ") + chunk("tok1") + usage + "data: [DONE]\n\n",
			content: "tok0 tok1", chunks: 2, context: 31, cached: 7},
		{name: "comments, other fields and CRLF-free blank lines are ignored",
			in:      ": keep-alive\n\nevent: message\nid: 1\n" + chunk("a") + "retry: 10\n\n" + usage + "data: [DONE]\n\n",
			content: "a", chunks: 1, context: 31, cached: 7},
		{name: "data without a space after the colon", in: `data:{"choices":[{"delta":{"content":"x"}}]}` + "\n\ndata:[DONE]\n\n",
			content: "x", chunks: 1, noUsage: true},
		{name: "one event over two data lines",
			in:      "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"joined\"}}]}\n\ndata: [DONE]\n\n",
			content: "joined", chunks: 1, noUsage: true},
		{name: "role-only and empty chunks carry no content", in: `data: {"choices":[{"delta":{"role":"assistant"}}]}` + "\n\n" + chunk("") + chunk("z") + "data: [DONE]\n\n",
			content: "z", chunks: 1, noUsage: true},
		{name: "[DONE] at EOF without a blank line", in: chunk("q") + "data: [DONE]", content: "q", chunks: 1, noUsage: true},
		{name: "no [DONE]", in: chunk("p"), content: "p", chunks: 1, noUsage: true, err: errNoDone},
		{name: "empty stream", in: "", noUsage: true, noFirst: true, err: errNoDone},
		{name: "error event mid-stream", in: chunk("p") + `data: {"error":{"message":"backend reset","code":"backend_error"}}` + "\n\n",
			content: "p", chunks: 1, noUsage: true, errText: "error event: backend reset (code backend_error)"},
		{name: "not JSON", in: "data: {oops\n\n", noUsage: true, noFirst: true, errText: "is not a JSON chunk"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at := time.Unix(100, 0)
			calls := 0
			now := func() time.Time { calls++; return at.Add(time.Duration(calls) * time.Second) }
			r, err := readSSE(strings.NewReader(tc.in), now)
			switch {
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("err = %v, want %v", err, tc.err)
			case tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)):
				t.Fatalf("err = %v, want one containing %q", err, tc.errText)
			case tc.err == nil && tc.errText == "" && err != nil:
				t.Fatalf("err = %v", err)
			}
			if r.Content != tc.content || r.Chunks != tc.chunks {
				t.Errorf("content %q in %d chunks, want %q in %d", r.Content, r.Chunks, tc.content, tc.chunks)
			}
			if tc.noUsage != (r.Usage == nil) {
				t.Fatalf("usage %+v, want present=%v", r.Usage, !tc.noUsage)
			}
			if r.Usage != nil && (r.Usage.ContextTokens != tc.context || r.Usage.cached() != tc.cached) {
				t.Errorf("context %d cached %d, want %d and %d", r.Usage.ContextTokens, r.Usage.cached(), tc.context, tc.cached)
			}
			// The clock stamps the first content chunk only.
			if tc.noFirst != r.First.IsZero() || (!r.First.IsZero() && !r.First.Equal(at.Add(time.Second))) {
				t.Errorf("first = %v (clock called %d times), want zero=%v", r.First, calls, tc.noFirst)
			}
		})
	}
}

func TestReadSSETooLongLine(t *testing.T) {
	in := "data: \"" + strings.Repeat("x", maxEvent+1) + "\"\n\n"
	if _, err := readSSE(strings.NewReader(in), time.Now); err == nil || errors.Is(err, errNoDone) {
		t.Fatalf("err = %v, want a read error for a line over %d bytes", err, maxEvent)
	}
}
