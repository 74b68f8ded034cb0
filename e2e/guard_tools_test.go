package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// post sends body to path on the gateway's API with the Tenant's key.
func (g *gwProc) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.api+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+g.key)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("gateway request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestGuardToolConversationAndEmbeddings: with a GuardrailPolicy that redacts requests, a tool
// conversation reaches the demo agent with every tool field (the agent refuses one that lost
// tool_call_id or a call's id, as vLLM does), a forced call comes back as an assistant message
// with tool_calls, and /v1/embeddings is served through the gateway with usage.
func TestGuardToolConversationAndEmbeddings(t *testing.T) {
	e, ns, g := guardEnv(t, "guard-tools")
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.Apply(t, ns, poolManifest("tools", "tools-model", img, 1, "--ttft-base=5ms", "--token-rate=500", "--tool-calls")+`---
apiVersion: neuronetes.io/v1alpha1
kind: GuardrailPolicy
metadata: {name: tools}
spec:
  targetRef: {kind: AgentPool, name: tools}
  request:
    - {name: mails, type: pii, action: redact, pii: {entities: [EMAIL_ADDRESS]}}
  response:
    - {name: answers, type: pii, action: redact, pii: {entities: [EMAIL_ADDRESS]}}
`)
	guardPoolReady(t, e, ns, "tools", 1)
	conv := `"messages":[{"role":"system","content":"cc ops@example.com"},{"role":"user","name":"jane","content":"mail jane@example.com the forecast"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"to\":\"jane@example.com\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","name":"get_weather","content":"sunny"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"max_tokens":4`
	var status int
	var body string
	Eventually(t, time.Minute, "the gateway routes tools-model", func() (bool, error) {
		status, body = g.post(t, "/v1/chat/completions", `{"model":"tools-model",`+conv+`}`)
		return status == http.StatusOK, fmt.Errorf("%d %s", status, body)
	})
	if !strings.Contains(body, `"finish_reason":"length"`) {
		t.Fatalf("the answer to a tool result is text: %s", body)
	}
	for _, stream := range []bool{false, true} {
		status, body = g.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":"tools-model","stream":%v,"tool_choice":"required",%s}`, stream, conv))
		if status != http.StatusOK || !strings.Contains(body, `"finish_reason":"tool_calls"`) || !strings.Contains(body, `"name":"get_weather"`) {
			t.Fatalf("forced call (stream %v): %d %s", stream, status, body)
		}
	}
	// What a gateway that drops the field sends is refused by the agent.
	status, body = g.post(t, "/v1/chat/completions", `{"model":"tools-model",`+strings.Replace(conv, `"tool_call_id":"call_1",`, "", 1)+`}`)
	if status != http.StatusBadRequest || !strings.Contains(body, "tool_call_id") {
		t.Fatalf("a tool message without tool_call_id: %d %s", status, body)
	}

	status, body = g.post(t, "/v1/embeddings", `{"model":"tools-model","input":["write to ana@example.com","b c"]}`)
	var emb struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &emb) != nil || len(emb.Data) != 2 || len(emb.Data[0].Embedding) == 0 || emb.Usage.PromptTokens != 5 {
		t.Fatalf("embeddings: %d %s", status, body)
	}
	if v := g.metric(t, "neuronetes_safety_blocks_total", map[string]string{"guardrail_type": "pii", "action": "redact"}); v < 1 {
		t.Fatalf("request redactions not counted: %v", v)
	}
}
