package e2e

// The gateway's AgentSession route in the session e2e: tenants of both namespaces, and a
// session chat through the gateway (POST /v1/sessions/<name>/chat/completions).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sessionTenantKeyB is the API key of tenant B (tenant A's is gatewayAPIKey, startGateway's).
const sessionTenantKeyB = "nn-e2e-session-tenant-b-key"

// sessionTenants creates an API-key Tenant allowed every model in each namespace: key
// gatewayAPIKey in nsA, sessionTenantKeyB in nsB.
func sessionTenants(t *testing.T, e *Env, nsA, nsB string) {
	t.Helper()
	for ns, key := range map[string]string{nsA: gatewayAPIKey, nsB: sessionTenantKeyB} {
		applyAPIKeyTenant(t, e, ns, key)
	}
}

// sessionReply is a session chat's answer through the gateway.
type sessionReply struct {
	status  int
	header  http.Header
	body    string // the whole body (error JSON, or the SSE lines)
	content string
	// prompt and completion are the usage of the stream's last chunk.
	prompt, completion float64
	// ttft is the time from sending to the first SSE event; total to the end of the body.
	ttft, total time.Duration
}

// sessionChat streams one chat turn to session through the gateway as the tenant of key.
func (g *gwProc) sessionChat(t *testing.T, key, session, content string) sessionReply {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "demo-model", "stream": true, "max_tokens": 16,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": content}}})
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.api+"/v1/sessions/"+session+"/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	return readSessionReply(t, req)
}

// readSessionReply sends req and reads its streamed (or error) answer.
func readSessionReply(t *testing.T, req *http.Request) sessionReply {
	t.Helper()
	start := time.Now()
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("gateway session request: %v", err)
	}
	defer resp.Body.Close()
	r := sessionReply{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		r.body, r.total = string(raw), time.Since(start)
		return r
	}
	var all strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		if r.ttft == 0 {
			r.ttft = time.Since(start)
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Prompt     float64 `json:"prompt_tokens"`
				Completion float64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &c) == nil {
			for _, ch := range c.Choices {
				r.content += ch.Delta.Content
			}
			if c.Usage != nil {
				r.prompt, r.completion = c.Usage.Prompt, c.Usage.Completion
			}
		}
	}
	r.body, r.total = all.String(), time.Since(start)
	return r
}
