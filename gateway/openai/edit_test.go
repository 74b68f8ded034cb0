package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// toolBody is a tool conversation with every field a gateway could lose: tool_calls, tool_call_id,
// name, image parts, unknown fields, number spellings and \u escapes.
const toolBody = `{"model":"m", "temperature":1.0e2,"messages":[` +
	`{"role":"system","content":"sys \u00e9 text","x-unknown":{"a":[1,2.50]}},` +
	`{"role":"user","name":"jane","content":[{"type":"text","text":"mail jane@example.com"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA=","detail":"low"}}]},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"send","arguments":"{\"to\":\"jane@example.com\"}"}}]},` +
	`{"role":"tool","tool_call_id":"call_1","name":"send","content":"sent"}],` +
	`"tools":[{"type":"function","function":{"name":"send","description":"mails jane@example.com","parameters":{"type":"object","properties":{"to":{"description":"e.g. jane@example.com"}}},"strict":true}}],"tool_choice":"auto","n":1E0}`

func TestEditKeepsEveryOtherByte(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route Route
		body  string
		edit  func(r *Request) error
		want  string // "" means the body as sent
	}{
		{"unchanged", RouteChat, toolBody, func(*Request) error { return nil }, ""},
		{"text part", RouteChat, toolBody, func(r *Request) error {
			return r.SetText(TextRef{Kind: KindContent, Message: 1, Index: 0}, "mail <EMAIL_ADDRESS>")
		}, strings.Replace(toolBody, `"text":"mail jane@example.com"`, `"text":"mail <EMAIL_ADDRESS>"`, 1)},
		{"tool arguments", RouteChat, toolBody, func(r *Request) error {
			return r.SetText(TextRef{Kind: KindToolArguments, Message: 2, Index: 0}, `{"to":"<EMAIL_ADDRESS>"}`)
		}, strings.Replace(toolBody, `"arguments":"{\"to\":\"jane@example.com\"}"`, `"arguments":"{\"to\":\"<EMAIL_ADDRESS>\"}"`, 1)},
		{"string content", RouteChat, toolBody, func(r *Request) error {
			return r.SetText(TextRef{Kind: KindContent, Message: 3, Index: -1}, "done")
		}, strings.Replace(toolBody, `"content":"sent"`, `"content":"done"`, 1)},
		{"tool description", RouteChat, toolBody, func(r *Request) error {
			return r.SetText(TextRef{Kind: KindToolDescription, Message: -1, Index: 0}, "mails <EMAIL_ADDRESS>")
		}, strings.Replace(toolBody, `"description":"mails jane@example.com"`, `"description":"mails <EMAIL_ADDRESS>"`, 1)},
		{"tool parameters", RouteChat, toolBody, func(r *Request) error {
			return r.SetText(TextRef{Kind: KindToolParameters, Message: -1, Index: 0}, `{"type":"object","properties":{"to":{"description":"e.g. <EMAIL_ADDRESS>"}}}`)
		}, strings.Replace(toolBody, `"e.g. jane@example.com"`, `"e.g. <EMAIL_ADDRESS>"`, 1)},
		{"prompt element", RouteCompletions, `{"model":"m","prompt":["a", "b@x.io" ,"c"],"echo":true}`, func(r *Request) error {
			return r.SetText(TextRef{Kind: KindPrompt, Index: 1}, "<E>")
		}, `{"model":"m","prompt":["a", "<E>" ,"c"],"echo":true}`},
		{"embeddings input", RouteEmbeddings, `{"model":"m","input":["a","b"],"dimensions":8}`, func(r *Request) error {
			return r.SetText(TextRef{Kind: KindPrompt, Index: 0}, "z")
		}, `{"model":"m","input":["z","b"],"dimensions":8}`},
		{"stream usage added", RouteChat, `{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true},"messages":[{"role":"user","content":"a","extra":1.0e2}]}`,
			func(*Request) error { return nil },
			`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true},"messages":[{"role":"user","content":"a","extra":1.0e2}]}`},
		{"stream usage false", RouteChat, `{"model":"m","stream":true,"stream_options":{"include_usage":false, "x":1},"messages":[{"role":"user","content":"a"}]}`,
			func(*Request) error { return nil },
			`{"model":"m","stream":true,"stream_options":{"include_usage":true, "x":1},"messages":[{"role":"user","content":"a"}]}`},
		{"stream options absent", RouteChat, `{"model":"m","stream":true,"messages":[{"role":"user","content":"a"}]}`,
			func(*Request) error { return nil },
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":true}}`},
		{"set and remove", RouteChat, toolBody, func(r *Request) error {
			r.Set("metadata", json.RawMessage(`{"k":"v"}`))
			r.Set("tool_choice", nil)
			r.Set("n", nil)
			return nil
		}, strings.Replace(toolBody, `,"tool_choice":"auto","n":1E0}`, `,"metadata":{"k":"v"}}`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(tc.route, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.edit(r); err != nil {
				t.Fatal(err)
			}
			got, err := r.Body()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == "" {
				want = tc.body
			}
			if string(got) != want {
				t.Fatalf("body\n got %s\nwant %s", got, want)
			}
			if !json.Valid(got) {
				t.Fatalf("invalid JSON %s", got)
			}
		})
	}
}

func TestTextFields(t *testing.T) {
	r, err := Parse(RouteChat, []byte(toolBody))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.TextFields() {
		got = append(got, f.Role+"="+f.Text)
	}
	want := []string{"system=sys é text", "user=mail jane@example.com", `assistant={"to":"jane@example.com"}`, "tool=sent",
		"tools=mails jane@example.com", `tools={"type":"object","properties":{"to":{"description":"e.g. jane@example.com"}}}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("texts %q, want %q", got, want)
	}
	r, _ = Parse(RouteCompletions, []byte(`{"model":"m","prompt":["ab","cd"]}`))
	if fs := r.TextFields(); len(fs) != 2 || fs[1].Text != "cd" || fs[1].Ref.Index != 1 {
		t.Fatalf("prompt fields %+v", fs)
	}
}

// An edit of a tool's schema that is no longer JSON is refused, and the body keeps the schema.
func TestToolParametersEditStaysJSON(t *testing.T) {
	r, err := Parse(RouteChat, []byte(toolBody))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetText(TextRef{Kind: KindToolParameters, Message: -1, Index: 0}, `{"type":`); err == nil {
		t.Fatal("a schema edit that is not JSON was accepted")
	}
	if err := r.SetText(TextRef{Kind: KindToolDescription, Message: -1, Index: 1}, "x"); err == nil {
		t.Fatal("an edit of tools[1] (absent) was accepted")
	}
	if b, _ := r.Body(); string(b) != toolBody {
		t.Fatalf("refused edits changed the body: %s", b)
	}
}

func TestParseToolFields(t *testing.T) {
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{"x":1}}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","Arguments":"{}","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{`{"model":"m","messages":[{"role":"user","content":"a","Tool_calls":[]}]}`, "messages[0].tool_calls"},
		{`{"model":"m","messages":["x"]}`, "messages"},
		{`{"model":"m","messages":[null]}`, "messages[0]"},
		{`{"model":"m","input":[1,2]}`, "input"},
	} {
		route := RouteChat
		if strings.Contains(tc.body, "input") {
			route = RouteEmbeddings
		}
		_, err := Parse(route, []byte(tc.body))
		e, ok := err.(*Error)
		if !ok || e.Body.Param == nil || *e.Body.Param != tc.param {
			t.Errorf("%s: %v, want a 400 naming %s", tc.body, err, tc.param)
		}
	}
}

func TestCloneIsolatesEdits(t *testing.T) {
	r, _ := Parse(RouteChat, []byte(toolBody))
	c := r.Clone()
	if err := c.SetText(TextRef{Kind: KindToolArguments, Message: 2, Index: 0}, "{}"); err != nil {
		t.Fatal(err)
	}
	c.Set("metadata", json.RawMessage(`{"neuronetes_shadow":"true"}`))
	if b, _ := r.Body(); string(b) != toolBody || r.Messages[2].ToolCalls[0].Arguments == "{}" {
		t.Fatalf("clone's edit leaked: %s", b)
	}
	b, _ := c.Body()
	if !strings.Contains(string(b), `"tool_call_id":"call_1"`) || !strings.Contains(string(b), `"arguments":"{}"`) {
		t.Fatalf("clone body %s", b)
	}
}
