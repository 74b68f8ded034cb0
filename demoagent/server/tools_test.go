package server

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestToolConversationFields refuses, as vLLM does, a tool conversation that lost a field: a
// gateway that drops tool_call_id or a tool call's id or name gets a 400 naming it.
func TestToolConversationFields(t *testing.T) {
	_, ts := newTestServer(t, fastEngine(), testConfig(), nil)
	call := func(fields string) string {
		return `{"role":"assistant","content":null,"tool_calls":[{` + fields + `}]}`
	}
	const full = `"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}`
	const result = `{"role":"tool","tool_call_id":"call_1","content":"sunny"}`
	for _, tc := range []struct {
		name, msgs string
		status     int
		param      string
	}{
		{"whole conversation", `{"role":"user","content":"w"},` + call(full) + `,` + result, 200, ""},
		{"tool without tool_call_id", `{"role":"user","content":"w"},` + call(full) + `,{"role":"tool","content":"sunny"}`, 400, "messages[2].tool_call_id"},
		{"call without id", `{"role":"user","content":"w"},` + call(`"type":"function","function":{"name":"get_weather","arguments":"{}"}`) + `,` + result, 400, "messages[1].tool_calls[0].id"},
		{"call without name", `{"role":"user","content":"w"},` + call(`"id":"call_1","type":"function","function":{"arguments":"{}"}`) + `,` + result, 400, "messages[1].tool_calls[0].function.name"},
		{"call without type", `{"role":"user","content":"w"},` + call(`"id":"call_1","function":{"name":"get_weather","arguments":"{}"}`) + `,` + result, 400, "messages[1].tool_calls[0].type"},
		{"tool calls on a user message", `{"role":"user","content":"w","tool_calls":[{` + full + `}]}`, 400, "messages[0].tool_calls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":2,"messages":[`+tc.msgs+`]}`, nil)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if tc.param == "" {
				return
			}
			var e struct {
				Error struct {
					Type, Message string
					Param         *string
				}
			}
			if json.Unmarshal(b, &e) != nil || e.Error.Type != "BadRequestError" && e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != tc.param {
				t.Fatalf("error %s, want an OpenAI error naming %s", b, tc.param)
			}
		})
	}
}

// TestToolChoice calls a tool when the request forces one (required, named), and under auto
// only with ToolCalls on and not in answer to a tool's result.
func TestToolChoice(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"get_weather"}}]`
	user := `{"role":"user","content":"w"}`
	answered := user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}`
	for _, tc := range []struct {
		name     string
		auto     bool
		choice   string
		msgs     string
		wantCall bool
	}{
		{"required without auto tool choice", false, `"required"`, user, true},
		{"named without auto tool choice", false, `{"type":"function","function":{"name":"get_weather"}}`, user, true},
		{"auto off", false, `"auto"`, user, false},
		{"auto on", true, `"auto"`, user, true},
		{"auto after a tool result", true, `"auto"`, answered, false},
		{"required after a tool result", true, `"required"`, answered, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := testConfig()
			sc.ToolCalls = tc.auto
			_, ts := newTestServer(t, fastEngine(), sc, nil)
			resp := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":2,"tool_choice":`+tc.choice+`,"messages":[`+tc.msgs+`],`+tools+`}`, nil)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := strings.Contains(string(b), `"finish_reason":"tool_calls"`); got != tc.wantCall {
				t.Fatalf("tool call %v, want %v: %s", got, tc.wantCall, b)
			}
		})
	}
}

func TestEmbeddings(t *testing.T) {
	_, ts := newTestServer(t, fastEngine(), testConfig(), nil)
	type out struct {
		Object string
		Data   []struct {
			Object    string
			Index     int
			Embedding json.RawMessage
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	for _, tc := range []struct {
		name, body string
		status     int
		n, tokens  int
		param      string
	}{
		{"string", `{"model":"m","input":"a b c"}`, 200, 1, 3, ""},
		{"strings", `{"model":"m","input":["a b","c"]}`, 200, 2, 3, ""},
		{"token ids", `{"model":"m","input":[1,2,3,4]}`, 200, 1, 4, ""},
		{"base64", `{"model":"m","input":"a","encoding_format":"base64"}`, 200, 1, 1, ""},
		{"dimensions", `{"model":"m","input":"a","dimensions":4}`, 200, 1, 1, ""},
		{"too many dimensions", `{"model":"m","input":"a","dimensions":4096}`, 400, 0, 0, "dimensions"},
		{"no input", `{"model":"m"}`, 400, 0, 0, "input"},
		{"bad format", `{"model":"m","input":"a","encoding_format":"int8"}`, 400, 0, 0, "encoding_format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, ts.URL+"/v1/embeddings", tc.body, nil)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if tc.status != 200 {
				if !strings.Contains(string(b), `"param":"`+tc.param+`"`) {
					t.Fatalf("error %s does not name %s", b, tc.param)
				}
				return
			}
			var o out
			if err := json.Unmarshal(b, &o); err != nil {
				t.Fatal(err)
			}
			if o.Object != "list" || len(o.Data) != tc.n || o.Usage.PromptTokens != tc.tokens || o.Usage.TotalTokens != tc.tokens || o.Data[0].Object != "embedding" {
				t.Fatalf("response %s", b)
			}
			if strings.Contains(tc.body, "base64") {
				var s string
				if json.Unmarshal(o.Data[0].Embedding, &s) != nil || len(s) == 0 {
					t.Fatalf("base64 embedding %s", o.Data[0].Embedding)
				}
				return
			}
			var v []float64
			if err := json.Unmarshal(o.Data[0].Embedding, &v); err != nil || len(v) == 0 {
				t.Fatalf("embedding %s", o.Data[0].Embedding)
			}
			if strings.Contains(tc.body, "dimensions") && len(v) != 4 {
				t.Fatalf("dimensions: %d values", len(v))
			}
			norm := 0.0
			for _, x := range v {
				norm += x * x
			}
			if norm < 0.999 || norm > 1.001 {
				t.Fatalf("not a unit vector: %v", v)
			}
		})
	}
	// Equal texts embed equally.
	a, _ := io.ReadAll(post(t, ts.URL+"/v1/embeddings", `{"model":"m","input":["x y","x y"]}`, nil).Body)
	var o out
	_ = json.Unmarshal(a, &o)
	if string(o.Data[0].Embedding) != string(o.Data[1].Embedding) {
		t.Fatalf("equal texts embed differently: %s", a)
	}
}
