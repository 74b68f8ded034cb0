package e2e

// Attack on the tool proxy's caller identity (docs/dispatcher.md, "Tool proxy"): pods that are
// not an AgentPool's try to call the pool's tool by carrying its neuronetes.io/pool label, with
// no credential, with their own genuine projected token of the tool proxy's audience, and from
// another namespace. Only the pool's own pod reaches the tool.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// spoofPod is a bare ledger-agent pod labelled as a pod of pool %[3]s, with a projected token of
// the tool proxy's audience mounted as the controller mounts it in pool pods.
const spoofPod = `apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  labels: {%[4]s: %[3]s}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: agent
    image: %[2]s
    imagePullPolicy: Never
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    args: ["--listen=:8000"]
    env: [{name: %[5]s, value: %[6]s/token}]
    volumeMounts: [{name: tool-token, mountPath: %[6]s, readOnly: true}]
    readinessProbe: {httpGet: {path: /readyz, port: 8000}, periodSeconds: 1}
  volumes:
  - name: tool-token
    projected: {sources: [{serviceAccountToken: {audience: %[7]q, expirationSeconds: 600, path: token}}]}
`

// toolCallFrom makes the ledger agent at podIP call url through the tool proxy (without its
// token when noToken) and returns the proxy's status and body.
func toolCallFrom(t *testing.T, podIP, url, args string, noToken bool) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"url": url, "arguments": json.RawMessage(args), "no_token": noToken})
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Post("http://"+podIP+":8000/call", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("call from %s: %v", podIP, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st int
	fmt.Sscanf(resp.Header.Get("X-Tool-Status"), "%d", &st)
	if st == 0 {
		t.Fatalf("call from %s did not reach the proxy: %d %s", podIP, resp.StatusCode, b)
	}
	return st, string(b)
}

// TestAttackToolProxyLabelSpoof: a pod that carries the pool's label but that no AgentPool
// controls is refused, with no credential (401 unknown_caller) and with a genuine projected token
// of the tool proxy's audience bound to itself (403 not_an_agent_pod); so is such a pod in
// another namespace; the pool's own pod, whose token the controller mounted, reaches the tool.
// The tool is called once, by the pool's pod, and every refusal is audited as refused_auth.
func TestAttackToolProxyLabelSpoof(t *testing.T) {
	d := dispSetup(t, "atk-tools", nil)
	e, ns := d.e, d.ns
	other := e.Namespace(t, "atk-tools-other")
	var toolCalls atomic.Int64
	tool := &http.Server{Addr: fmt.Sprintf("10.88.0.1:%d", freePort(t)), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toolCalls.Add(1)
		_, _ = io.WriteString(w, `{"secret":"only-for-callers"}`)
	})}
	go func() { _ = tool.ListenAndServe() }()
	t.Cleanup(func() { _ = tool.Close() })
	img := e.Image(t, "ledger-agent", "./e2e/cmd/ledger-agent")
	spoof := func(name string) string {
		return fmt.Sprintf(spoofPod, name, img, "callers", nnv1.PoolLabel, nnv1.ToolTokenFileEnv, nnv1.ToolTokenDir, nnv1.ToolProxyAudience)
	}
	e.Apply(t, ns, poolManifest("callers", "m1", img, 1)+fmt.Sprintf(`---
apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: secret-tool}
spec:
  type: http
  endpoint: http://%s/secret
  agentPoolRef: {name: callers}
  tool: {timeout: 5s}
---
`, tool.Addr)+spoof("spoof"))
	e.Apply(t, other, spoof("spoof"))
	toolAddr := fmt.Sprintf("10.88.0.1:%d", freePort(t))
	dp := startDispatcher(t, e, ns, d.gw.api, d.redis.Addr, "d-a", "--tool-listen", toolAddr)
	waitBindingCondition(t, e, ns, "secret-tool", "Ready", "True", 60*time.Second)
	guardPoolReady(t, e, ns, "callers", 1)
	spoofIP := e.WaitPodRunning(t, ns, "spoof", 2*time.Minute).Status.PodIP
	otherIP := e.WaitPodRunning(t, other, "spoof", 2*time.Minute).Status.PodIP
	url := "http://" + toolAddr + "/v1/tools/" + ns + "/secret-tool"

	for _, tc := range []struct {
		name, ip string
		noToken  bool
		status   int
		code     string
	}{
		{"labelled pod, no token", spoofIP, true, 401, "unknown_caller"},
		{"labelled pod, its own tool-audience token", spoofIP, false, 403, "not_an_agent_pod"},
		{"labelled pod of another namespace, its own token", otherIP, false, 403, "not_an_agent_pod"},
	} {
		st, b := toolCallFrom(t, tc.ip, url, `{}`, tc.noToken)
		if st != tc.status || !strings.Contains(b, `"code":"`+tc.code+`"`) || strings.Contains(b, "only-for-callers") {
			t.Errorf("%s: %d %s, want %d %s", tc.name, st, b, tc.status, tc.code)
		} else {
			t.Logf("[e2e] %s refused: %s", tc.name, strings.TrimSpace(b))
		}
	}
	if n := toolCalls.Load(); n != 0 {
		t.Fatalf("the tool was called %d times by pods of no AgentPool", n)
	}
	pod := poolPods(t, e, ns, "callers")["serving"][0]
	if st, b := toolCallFrom(t, pod.Status.PodIP, url, `{}`, false); st != 200 || !strings.Contains(b, "only-for-callers") {
		t.Fatalf("the pool's own pod: %d %s", st, b)
	}
	if n := toolCalls.Load(); n != 1 {
		t.Fatalf("the tool was called %d times, want 1", n)
	}
	resp, err := http.Get("http://" + dp.admin + "/audit?tool=secret-tool")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var audit struct {
		Entries []struct{ Pool, Pod, Outcome, Error string }
	}
	if err := json.Unmarshal(raw, &audit); err != nil || len(audit.Entries) != 4 {
		t.Fatalf("audit: %v %s", err, raw)
	}
	for i, want := range []struct{ code, pod string }{{"unknown_caller", ""}, {"not_an_agent_pod", ns + "/spoof"}, {"not_an_agent_pod", other + "/spoof"}} {
		if a := audit.Entries[i]; a.Outcome != "refused_auth" || a.Error != want.code || a.Pool != "" || a.Pod != want.pod {
			t.Errorf("audit entry %d %+v, want refused_auth %s of pod %q without a pool", i, a, want.code, want.pod)
		}
	}
	if a := audit.Entries[3]; a.Outcome != "ok" || a.Pool != "callers" || a.Pod != pod.Name {
		t.Errorf("audit entry of the pool's call %+v", a)
	}
}
