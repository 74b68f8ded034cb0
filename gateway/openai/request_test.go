package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		route Route
		body  string
		param string
		msg   string
	}{
		{RouteChat, `nope`, "", "not a JSON object"},
		{RouteChat, `[1]`, "", "not a JSON object"},
		{RouteChat, `{"messages":[{"role":"user","content":"x"}]}`, "model", "model"},
		{RouteChat, `{"model":"m"}`, "messages", "messages"},
		{RouteChat, `{"model":"m","messages":[{"content":"x"}]}`, "messages[0].role", "role"},
		{RouteChat, `{"model":"m","messages":[{"role":"user"}],"max_tokens":-1}`, "max_tokens", "negative"},
		{RouteChat, `{"model":"m","messages":[{"role":"user"}],"max_tokens":"ten"}`, "max_tokens", "invalid"},
		{RouteChat, `{"model":"m","messages":[{"role":"user"}],"tools":[1]}`, "tools", "tools"},
		{RouteChat, `{"model":"m","messages":[{"role":"user"}],"tools":[{"function":{"description":7}}]}`, "tools.function.description", "description"},
		{RouteCompletions, `{"model":"m"}`, "prompt", "prompt"},
		{RouteCompletions, `{"model":"m","prompt":5}`, "prompt", "string"},
	} {
		_, err := Parse(tc.route, []byte(tc.body))
		e, ok := err.(*Error)
		if !ok || e.Status != 400 {
			t.Fatalf("%s: %v", tc.body, err)
		}
		p := ""
		if e.Body.Param != nil {
			p = *e.Body.Param
		}
		if p != tc.param || !strings.Contains(e.Body.Message, tc.msg) {
			t.Errorf("%s: param %q message %q; want %q containing %q", tc.body, p, e.Body.Message, tc.param, tc.msg)
		}
	}
}

func TestParseAndBody(t *testing.T) {
	r, err := Parse(RouteChat, []byte(`{"model":"m","stream":true,"max_completion_tokens":9,"max_tokens":3,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{}},{"type":"text","text":"there"}]}],"tools":[{"type":"function","function":{"name":"f","x-unknown":[1]}}],"metadata":{"k":"v"},"user":"u"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxTokens != 9 || r.Messages[1].Text() != "hi\nthere" || r.Metadata["k"] != "v" || r.User != "u" {
		t.Fatalf("parsed %+v", r)
	}
	if got := r.PromptText(); got != "system: be brief\nuser: hi\nthere\n" {
		t.Fatalf("prompt text %q", got)
	}
	b, _ := r.Body()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("spliced body %s: %v", b, err)
	}
	if m["stream_options"].(map[string]any)["include_usage"] != true || m["tools"] == nil {
		t.Fatalf("body %s", b)
	}
	c := r.Clone()
	_ = c.SetMessageText(0, "changed")
	c.Set("tools", nil)
	b2, _ := c.Body()
	b1, _ := r.Body()
	if !strings.Contains(string(b2), "changed") || strings.Contains(string(b2), "tools") || strings.Contains(string(b1), "changed") {
		t.Fatalf("clone leaked: %s / %s", b1, b2)
	}
	r, _ = Parse(RouteChat, []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":false,"x":1},"messages":[{"role":"user","content":"a"}]}`))
	b, _ = r.Body()
	if !strings.Contains(string(b), `"include_usage":true`) || !strings.Contains(string(b), `"x":1`) {
		t.Fatalf("stream_options not merged: %s", b)
	}
	r, _ = Parse(RouteCompletions, []byte(`{"model":"m","prompt":["ab","cd"]}`))
	if r.Prompt != "abcd" || r.PromptText() != "abcd" {
		t.Fatalf("prompt %q", r.Prompt)
	}
	raw := []byte(`{"model":"m","messages":[{"role":"user","content":"a"}]}`)
	r, _ = Parse(RouteChat, raw)
	if b, _ := r.Body(); string(b) != string(raw) {
		t.Fatal("an unchanged, unstreamed body is not forwarded as sent")
	}
}

func TestEditChoices(t *testing.T) {
	d := []byte(`{"id":"x","choices":[{"index":0,"delta":{"content":"a","role":"assistant"},"logprobs":{"content":[{"token":"a"}]},"finish_reason":null}],"system_fingerprint":"fp"}`)
	for _, tc := range []struct {
		name string
		edit ChoiceEdit
		want string
	}{
		{"content", ChoiceEdit{Pieces: []Piece{{Field: FieldContent, Text: "b"}}, DropLogprobs: true},
			`{"id":"x","choices":[{"index":0,"delta":{"content":"b","role":"assistant"},"logprobs":null,"finish_reason":null}],"system_fingerprint":"fp"}`},
		{"added tool arguments", ChoiceEdit{Pieces: []Piece{{Field: FieldToolArguments, Tool: 2, Text: "{}"}}},
			`{"id":"x","choices":[{"index":0,"delta":{"content":"a","role":"assistant","tool_calls":[{"index":2,"function":{"arguments":"{}"}}]},"logprobs":{"content":[{"token":"a"}]},"finish_reason":null}],"system_fingerprint":"fp"}`},
		{"reasoning", ChoiceEdit{Pieces: []Piece{{Field: FieldReasoningContent, Text: "<R>"}}},
			`{"id":"x","choices":[{"index":0,"delta":{"content":"a","role":"assistant","reasoning_content":"<R>"},"logprobs":{"content":[{"token":"a"}]},"finish_reason":null}],"system_fingerprint":"fp"}`},
	} {
		out, err := EditChoices(d, []ChoiceEdit{tc.edit})
		if err != nil || string(out) != tc.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", tc.name, out, err, tc.want)
		}
	}
}

// TestFieldMatchesDecoding: Field reads the members' spans; it returns what decoding the body
// into a map of raw members returns, escaped keys and keys inside strings included (Parse refuses
// duplicate keys).
func TestFieldMatchesDecoding(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"user":"u1"}`,
		`{"model":"m","messages":[{"role":"user","content":"x \"user\":1"}],"metadata":{"k":"v"},"conversation_id":"c"}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"us\u0065r":"escaped", "n" : 3 }`,
	} {
		r, err := Parse(RouteChat, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"user", "conversation_id", "metadata", "n", "model", "absent"} {
			if got := r.Field(k); string(got) != string(want[k]) {
				t.Errorf("%s: Field(%q) = %s, want %s", body, k, got, want[k])
			}
		}
	}
}

// TestTextCachedPerMessage: Text decodes a message's content once and keeps it for copies of the
// request; an edit gives the message its new text.
func TestTextCachedPerMessage(t *testing.T) {
	r, err := Parse(RouteChat, []byte(`{"model":"m","messages":[{"role":"user","content":"a \"b\" c"},{"role":"user","content":[{"type":"text","text":"p1"},{"type":"text","text":"p2"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := r.Clone()
	if got := r.Messages[0].Text(); got != `a "b" c` {
		t.Fatalf("Text = %q", got)
	}
	if r.Messages[0].text.Load() == nil || c.Messages[0].text.Load() == nil {
		t.Fatal("text not cached for the request and its copy")
	}
	if got := c.Messages[1].Text(); got != "p1\np2" {
		t.Fatalf("parts Text = %q", got)
	}
	if err := r.SetMessageText(0, "new"); err != nil {
		t.Fatal(err)
	}
	if got := r.Messages[0].Text(); got != "new" {
		t.Fatalf("after SetMessageText: %q", got)
	}
	if got := (Message{Content: json.RawMessage(`"plain"`)}).Text(); got != "plain" {
		t.Fatalf("uncached message: %q", got)
	}
}
