package gwclient

import (
	"encoding/json"
	"fmt"
	"strings"
)

// BuildChat turns a queued message's payload into a chat completion request for model:
//   - a JSON object with "messages" is taken as the request: model is set, stream is false,
//     every other field is kept;
//   - anything else (text, or JSON without messages) becomes one user message whose content is
//     the payload as text.
//
// metadata is merged into the request's "metadata" object (string values, as in the OpenAI API),
// where the agent can read the message id.
func BuildChat(payload []byte, model string, metadata map[string]string) ([]byte, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(payload, &req); err != nil || req["messages"] == nil {
		content, _ := json.Marshal(string(payload))
		req = map[string]json.RawMessage{"messages": json.RawMessage(`[{"role":"user","content":` + string(content) + `}]`)}
	}
	m, _ := json.Marshal(model)
	req["model"] = m
	req["stream"] = json.RawMessage("false")
	delete(req, "stream_options")
	if len(metadata) > 0 {
		md := map[string]any{}
		if raw := req["metadata"]; raw != nil {
			if err := json.Unmarshal(raw, &md); err != nil {
				return nil, fmt.Errorf("payload field metadata: not an object: %w", err)
			}
		}
		for k, v := range metadata {
			md[k] = v
		}
		b, _ := json.Marshal(md)
		req["metadata"] = b
	}
	out, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("build chat request: %w", err)
	}
	return out, nil
}

// Field returns the string at a dot-separated path of a JSON object payload ("" when the
// payload is not JSON or the path does not lead to a string or number).
func Field(payload []byte, path string) string {
	if path == "" {
		return ""
	}
	var v any
	if json.Unmarshal(payload, &v) != nil {
		return ""
	}
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%f", x), "0"), ".")
	}
	return ""
}
