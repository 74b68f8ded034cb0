package e2e

// Guardrail e2e (docs/guardrails.md): the gateway runs as a host process in cluster mode over a
// fresh namespace on the local cluster (it routes to pod IPs from its pod watch), the controller
// runs the pools.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gwProc is cmd/gateway run as a host process.
type gwProc struct {
	api, admin string
	// key is the API key of the test's Tenant.
	key    string
	cmd    *exec.Cmd
	exited chan error
}

// gatewayAPIKey is the API key of the Tenant every gateway e2e test creates in its namespace.
const gatewayAPIKey = "nn-e2e-guard-rollout-key"

// startGateway runs the gateway in cluster mode watching ns, with authentication (requests carry
// the API key of the Tenant that guardEnv creates).
func startGateway(t *testing.T, e *Env, ns string, extra ...string) *gwProc {
	t.Helper()
	bin := e.HostBinary(t, "./cmd/gateway")
	g := &gwProc{api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), admin: fmt.Sprintf("127.0.0.1:%d", freePort(t)), key: gatewayAPIKey}
	logf, err := os.Create(filepath.Join(t.TempDir(), "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig", e.Kubeconfig, "--namespaces", ns, "--auth=required",
		"--listen", g.api, "--admin-listen", g.admin, "--egress-allow-cidrs=" + e2eEgressAllow, "-v=2"}, extra...)
	g.cmd = exec.Command(bin, args...)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	g.exited = make(chan error, 1)
	go func() { g.exited <- g.cmd.Wait() }()
	t.Cleanup(func() {
		_ = g.cmd.Process.Signal(syscall.SIGKILL)
		<-g.exited
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 48000 {
				b = b[len(b)-48000:]
			}
			t.Logf("gateway log tail:\n%s", b)
		}
		logf.Close()
	})
	Eventually(t, 90*time.Second, "gateway /readyz", func() (bool, error) {
		select {
		case err := <-g.exited:
			g.exited <- err
			t.Fatalf("gateway exited: %v", err)
		default:
		}
		resp, err := http.Get("http://" + g.admin + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return g
}

// gwReply is a gateway response: status, headers, and the body (for streams: the concatenated
// content deltas, tool calls noted).
type gwReply struct {
	status    int
	header    http.Header
	body      string
	content   string
	toolCalls int
}

// chat sends a chat completion through the gateway.
func (g *gwProc) chat(t *testing.T, model, session, content string, stream bool, extra map[string]any) gwReply {
	t.Helper()
	body := map[string]any{"model": model, "stream": stream, "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": content}}}
	for k, v := range extra {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.api+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+g.key)
	if session != "" {
		req.Header.Set("X-Session-Id", session)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("gateway request: %v", err)
	}
	defer resp.Body.Close()
	r := gwReply{status: resp.StatusCode, header: resp.Header}
	if !stream || resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		r.body = string(raw)
		var whole struct {
			Choices []struct {
				Message struct {
					Content   string            `json:"content"`
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if json.Unmarshal(raw, &whole) == nil && len(whole.Choices) > 0 {
			r.content, r.toolCalls = whole.Choices[0].Message.Content, len(whole.Choices[0].Message.ToolCalls)
		}
		return r
	}
	var all strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string            `json:"content"`
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) == nil {
			for _, ch := range c.Choices {
				r.content += ch.Delta.Content
				r.toolCalls += len(ch.Delta.ToolCalls)
			}
		}
	}
	r.body = all.String()
	return r
}

// metric sums the gateway's samples of name whose labels contain every want label.
func (g *gwProc) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		t.Fatalf("gateway metrics: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return sumMetric(string(raw), name, want)
}

// sumMetric sums the samples of name in Prometheus text whose labels include want.
func sumMetric(text, name string, want map[string]string) float64 {
	total := 0.0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && strings.Contains(line, fmt.Sprintf(`%s="%s"`, k, v))
		}
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err == nil {
			total += v
		}
	}
	return total
}

// poolManifest is an AgentClass serving model (its modelRef) and an AgentPool of it.
func poolManifest(name, model, image string, replicas int, args ...string) string {
	quoted := make([]string, 0, len(args)+1)
	for _, a := range append([]string{"--listen=:8000"}, args...) {
		quoted = append(quoted, fmt.Sprintf("%q", a))
	}
	return fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: %[1]s}
spec:
  modelRef: {name: %[2]s}
  sidecar: {inject: false}
  template:
    spec:
      terminationGracePeriodSeconds: 2
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: agent
          image: %[3]s
          imagePullPolicy: Never
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
          args: [%[5]s]
          ports: [{name: http, containerPort: 8000}]
          readinessProbe:
            httpGet: {path: /readyz, port: 8000}
            periodSeconds: 1
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: %[1]s}
spec:
  agentClassRef: {name: %[1]s}
  minReplicas: %[4]d
  maxReplicas: %[4]d
  replicas: %[4]d
`, name, model, image, replicas, strings.Join(quoted, ", "))
}

// guardPoolReady waits until pool has n Ready serving pods.
func guardPoolReady(t *testing.T, e *Env, ns, pool string, n int) {
	t.Helper()
	Eventually(t, 4*time.Minute, "pool "+pool+" ready", func() (bool, error) {
		return readyCount(poolPods(t, e, ns, pool)["serving"]) >= n, nil
	})
}

// applyAPIKeyTenant creates Tenant e2e in ns, allowed every model, whose API key (Secret
// e2e-keys) is key.
func applyAPIKeyTenant(t *testing.T, e *Env, ns, key string) {
	t.Helper()
	e.Apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: e2e-keys
  labels: {neuronetes.io/api-keys: "true"}
stringData: {key1: %s}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: e2e}
spec:
  apiKeys: [{secretName: e2e-keys}]
  models: ["*"]
`, key))
}

// guardEnv starts the controller and the gateway over a fresh namespace.
func guardEnv(t *testing.T, prefix string, gatewayArgs ...string) (*Env, string, *gwProc) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.NamespaceWithPodSecurity(t, prefix, "restricted", "")
	applyAPIKeyTenant(t, e, ns, gatewayAPIKey)
	g := startGateway(t, e, ns, gatewayArgs...)
	startController(t, e, ns, "neuronetes.local/no-sidecar:dev", "", "--rollout-gateway-metrics-urls=http://"+g.admin+"/metrics")
	return e, ns, g
}

// TestGuardrailsThroughGateway: a card number is blocked for the pool with the policy and
// counted in neuronetes_safety_blocks_total, the same request for a pool without it passes; an
// e-mail split across SSE chunks reaches the client redacted; a remote check that times out
// follows its failure policy (closed: 503, open: 200).
func TestGuardrailsThroughGateway(t *testing.T) {
	e, ns, g := guardEnv(t, "guard")
	// The worked examples are accepted by the real API server (schema and CEL rules).
	for _, f := range []string{"guardrails/guardrailpolicy.yaml", "rollout/agentrollout.yaml"} {
		e.Kubectl(t, "apply", "--dry-run=server", "-n", ns, "-f", filepath.Join(e.Root, "deploy", "examples", f))
	}
	echo := e.Image(t, "echo-agent", "./e2e/cmd/echo-agent")
	slow := slowWebhook(t)
	e.Apply(t, ns, poolManifest("guarded", "guarded-model", echo, 1, "--chunk=3")+"---\n"+
		poolManifest("open", "open-model", echo, 1, "--chunk=3")+"---\n"+
		poolManifest("failclosed", "closed-model", echo, 1)+"---\n"+
		poolManifest("failopen", "failopen-model", echo, 1)+"---\n"+fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: GuardrailPolicy
metadata: {name: guarded}
spec:
  targetRef: {kind: AgentPool, name: guarded}
  request:
    - {name: cards, type: pii, action: block, pii: {entities: [CREDIT_CARD]}}
  response:
    - {name: answers, type: pii, action: redact, pii: {entities: [EMAIL_ADDRESS]}}
---
apiVersion: neuronetes.io/v1alpha1
kind: GuardrailPolicy
metadata: {name: closed}
spec:
  targetRef: {kind: AgentClass, name: failclosed}
  request:
    - {name: slow-webhook, type: webhook, timeout: 200ms, failurePolicy: Closed, webhook: {url: "%[1]s"}}
---
apiVersion: neuronetes.io/v1alpha1
kind: GuardrailPolicy
metadata: {name: open}
spec:
  targetRef: {kind: AgentPool, name: failopen}
  request:
    - {name: slow-webhook, type: webhook, timeout: 200ms, failurePolicy: Open, webhook: {url: "%[1]s"}}
`, slow))
	for _, p := range []string{"guarded", "open", "failclosed", "failopen"} {
		guardPoolReady(t, e, ns, p, 1)
	}
	card := "please charge my card 4111 1111 1111 1111 today"
	var r gwReply
	// A block is answered as OpenAI answers a filtered completion: 200, finish_reason
	// content_filter, no text.
	Eventually(t, time.Minute, "the gateway routes guarded-model with its policy", func() (bool, error) {
		r = g.chat(t, "guarded-model", "s1", card, false, nil)
		return r.status == http.StatusOK && strings.Contains(r.body, `"finish_reason":"content_filter"`), fmt.Errorf("status %d: %s", r.status, r.body)
	})
	if r.content != "" || strings.Contains(r.body, "4111") {
		t.Fatalf("block body: %s", r.body)
	}
	if r = g.chat(t, "guarded-model", "s1", card, true, nil); r.status != http.StatusOK || !strings.Contains(r.body, `"finish_reason":"content_filter"`) ||
		!strings.Contains(r.body, "data: [DONE]") || strings.Contains(r.body, "4111") {
		t.Fatalf("streamed block: %d %s", r.status, r.body)
	}
	if v := g.metric(t, "neuronetes_safety_blocks_total", map[string]string{"guardrail_type": "pii", "action": "block"}); v < 1 {
		t.Fatalf("neuronetes_safety_blocks_total{pii,block} = %v", v)
	}
	if r := g.chat(t, "open-model", "s2", card, false, nil); r.status != http.StatusOK || r.content != card {
		t.Fatalf("pool without the policy: %d %q", r.status, r.body)
	}

	msg := "sure, write to ana.lopez@example.com and we answer within a day"
	r = g.chat(t, "guarded-model", "s3", msg, true, nil)
	if r.status != http.StatusOK || r.content != "sure, write to <EMAIL_ADDRESS> and we answer within a day" {
		t.Fatalf("streamed redaction: %d %q\n%s", r.status, r.content, r.body)
	}
	if strings.Contains(r.body, "example.com") || strings.Count(r.body, "data: ") < 10 {
		t.Fatalf("the e-mail leaked or the answer was not streamed in chunks:\n%s", r.body)
	}

	start := time.Now()
	r = g.chat(t, "closed-model", "s4", "hello", false, nil)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "guardrail_unavailable") || time.Since(start) > 5*time.Second {
		t.Fatalf("fail closed: %d %s after %s", r.status, r.body, time.Since(start))
	}
	r = g.chat(t, "failopen-model", "s5", "hello", false, nil)
	if r.status != http.StatusOK || r.content != "hello" {
		t.Fatalf("fail open: %d %s", r.status, r.body)
	}
	if v := g.metric(t, "neuronetes_guardrail_errors_total", map[string]string{"guardrail_type": "webhook"}); v < 2 {
		t.Fatalf("webhook failures counted %v, want 2", v)
	}
}

// slowWebhook is a host webhook that answers after 3 s (pods reach the host, and so does the
// gateway on the host).
func slowWebhook(t *testing.T) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`{"action":"allow"}`))
	})}
	go func() { _ = srv.ListenAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + addr
}
