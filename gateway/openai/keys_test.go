package openai

import (
	"bytes"
	"strings"
	"testing"
)

// A field the gateway reads, sent twice or in another case, is refused with a 400 naming it;
// encoding/json would read one spelling and the model server the other.
func TestParseRefusesDuplicateAndCaseVariantKeys(t *testing.T) {
	const attack = `[{"role":"user","content":"attack"}]`
	const benign = `[{"role":"user","content":"hello"}]`
	for _, tc := range []struct {
		name, body, param, msg string
		route                  Route
	}{
		{"messages then Messages", `{"model":"m","messages":` + attack + `,"Messages":` + benign + `}`, "messages", `"Messages"`, RouteChat},
		{"Messages then messages", `{"model":"m","Messages":` + benign + `,"messages":` + attack + `}`, "messages", `"Messages"`, RouteChat},
		{"messages twice", `{"model":"m","messages":` + attack + `,"messages":` + benign + `}`, "messages", "twice", RouteChat},
		{"Messages alone", `{"model":"m","Messages":` + benign + `}`, "messages", `"Messages"`, RouteChat},
		{"model then Model", `{"model":"allowed","Model":"forbidden","messages":` + benign + `}`, "model", `"Model"`, RouteChat},
		{"MODEL then model", `{"MODEL":"forbidden","model":"allowed","messages":` + benign + `}`, "model", `"MODEL"`, RouteChat},
		{"model twice", `{"model":"allowed","model":"forbidden","messages":` + benign + `}`, "model", "twice", RouteChat},
		{"escaped case variant", `{"model":"m","\u004dessages":` + benign + `,"messages":` + attack + `}`, "messages", `"Messages"`, RouteChat},
		{"Unicode fold (long s)", `{"model":"m","messages":` + benign + `,"ſtream":true}`, "stream", `"ſtream"`, RouteChat},
		{"Unicode fold (Kelvin sign)", `{"model":"m","messages":` + benign + `,"max_to\u212Aens":1}`, "max_tokens", "max_to", RouteChat},
		{"message role", `{"model":"m","messages":[{"role":"user","Role":"system","content":"x"}]}`, "messages[0].role", `"Role"`, RouteChat},
		{"message content", `{"model":"m","messages":[{"role":"user","content":"attack","Content":"hello"}]}`, "messages[0].content", `"Content"`, RouteChat},
		{"content part text", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"attack","Text":"hello"}]}]}`,
			"messages[0].content[0].text", `"Text"`, RouteChat},
		{"stream_options", `{"model":"m","messages":` + benign + `,"stream_options":{"include_usage":true,"Include_Usage":false}}`,
			"stream_options.include_usage", `"Include_Usage"`, RouteChat},
		{"metadata key twice", `{"model":"m","messages":` + benign + `,"metadata":{"conversation_id":"a","conversation_id":"b"}}`,
			"metadata.conversation_id", "twice", RouteChat},
		{"tool description", `{"model":"m","messages":` + benign + `,"tools":[{"type":"function","function":{"name":"f","description":"attack","Description":"hello"}}]}`,
			"tools[0].function.description", `"Description"`, RouteChat},
		{"tools then Tools", `{"model":"m","messages":` + benign + `,"tools":[],"Tools":[]}`, "tools", `"Tools"`, RouteChat},
		{"prompt then Prompt", `{"model":"m","prompt":"attack","Prompt":"hello"}`, "prompt", `"Prompt"`, RouteCompletions},
		{"user then User", `{"model":"m","prompt":"x","user":"a","User":"b"}`, "user", `"User"`, RouteCompletions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.route, []byte(tc.body))
			e, ok := err.(*Error)
			if !ok || e.Status != 400 || e.Body.Param == nil || *e.Body.Param != tc.param || !strings.Contains(e.Body.Message, tc.msg) {
				t.Fatalf("Parse: %v, want a 400 naming %s (%s)", err, tc.param, tc.msg)
			}
		})
	}
}

// Ordinary bodies pass and are forwarded byte for byte, including keys the gateway does not
// read in any case and repeated.
func TestParseKeepsOrdinaryBodies(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"metadata":{"a":"1","A":"2"}}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},{"role":"user","content":"x"}],"Seed":1,"seed":2,"x_custom":1,"x_custom":2}`,
		` {"model":"m","prompt":["a","b"],"stream":false,"user":"u"}`,
	} {
		route := RouteChat
		if strings.Contains(body, `"prompt"`) {
			route = RouteCompletions
		}
		r, err := Parse(route, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		got, err := r.Body()
		if err != nil || !bytes.Equal(got, []byte(body)) {
			t.Fatalf("forwarded %s (%v), want the body as sent %s", got, err, body)
		}
	}
}

// Malformed and deeply nested bodies are left to the decoder's error: the key walk neither
// panics nor answers for them.
func TestCheckKeysMalformed(t *testing.T) {
	full := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a \"q\" \\ b"}]}],"metadata":{"k\u00e9":"v"},"x":[1,true,null,{"y":-2.5e3}]}`
	for i := range len(full) {
		if err := checkKeys([]byte(full[:i])); err != nil {
			t.Fatalf("prefix %q: %v", full[:i], err)
		}
		if _, err := Parse(RouteChat, []byte(full[:i])); err == nil {
			t.Fatalf("prefix %q parsed", full[:i])
		}
	}
	if _, err := Parse(RouteChat, []byte(full)); err != nil {
		t.Fatalf("full body: %v", err)
	}
	deep := `{"model":"m","x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `,"messages":[{"role":"user","content":"x"}]}`
	if _, err := Parse(RouteChat, []byte(deep)); err == nil {
		t.Fatal("a body nested 20000 deep parsed")
	}
}
