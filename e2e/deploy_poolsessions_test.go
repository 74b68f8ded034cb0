package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/images"
)

// deployPoolKey is the API key of the tenant of deployPoolSessionsYAML.
const deployPoolKey = "sk-e2e-deploy-pool-5e21a9"

// deployPoolSessionsYAML: a tenant, and an AgentPool through sessions (spec.sessions) of one
// session at most whose class runs the demo agent as model deploy-pool-llm.
const deployPoolSessionsYAML = `apiVersion: v1
kind: Secret
metadata: {name: deploy-pool-keys, labels: {neuronetes.io/api-keys: "true"}}
stringData: {k: %[1]s}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: deploy-pool}
spec:
  apiKeys: [{secretName: deploy-pool-keys}]
  models: [deploy-pool-llm]
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: deploy-pool}
spec:
  modelRef: {name: deploy-pool-llm}
  sidecar: {inject: false}
  template:
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: agent
          image: %[2]s
          imagePullPolicy: Never
          securityContext: %[3]s
          args: ["--listen=:8000", "--model=deploy-pool-llm", "--token-rate=500", "--default-max-tokens=8"]
          ports: [{name: http, containerPort: 8000}]
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: deploy-pool}
spec:
  agentClassRef: {name: deploy-pool}
  maxReplicas: 1
  sessions: {idleTimeout: 10m}
`

// deployPoolThroughSessions is TestDeployLocal's subtest PoolThroughSessions: the chart-installed
// gateway serves an AgentPool through sessions. A conversation's first turn through the gateway's
// Service is answered by a pod of a session the gateway created (under its create right and the
// chart's admission policy) and the chart's controller started (under the chart's
// NetworkPolicies, which must let the gateway reach the session pod); a second conversation at
// the pool's spec.maxReplicas (1) gets 429 and creates nothing.
func deployPoolThroughSessions(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	ns := r.exampleNS
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.Apply(t, ns, fmt.Sprintf(deployPoolSessionsYAML, deployPoolKey, img, images.RestrictedSecurityContext))
	c := crClient(t, e.Config)
	sessions := func() []v1alpha1.AgentSession {
		var l v1alpha1.AgentSessionList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.PoolSessionLabel: "deploy-pool"}); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	t.Cleanup(func() {
		if t.Failed() {
			logSessionObjects(t, c, ns)
			logs, _ := e.KubectlErr("-n", r.namespace, "logs", "deploy/"+r.name+"-neuronetes-gateway", "--tail=100")
			t.Logf("gateway log:\n%s", logs)
		}
		e.KubectlErr("-n", ns, "delete", "agentpool/deploy-pool", "agentclass/deploy-pool", "tenant/deploy-pool", "secret/deploy-pool-keys", "--ignore-not-found")
		e.KubectlErr("-n", ns, "delete", "agentsessions", "-l", v1alpha1.PoolSessionLabel+"=deploy-pool", "--ignore-not-found")
	})
	svc, err := e.Kube.CoreV1().Services(r.namespace).Get(ctx, r.name+"-neuronetes-gateway", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/v1/chat/completions"
	chat := func(conv string) (int, string, string) {
		b, _ := json.Marshal(map[string]any{"model": "deploy-pool-llm", "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": "hello from " + conv}}})
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+deployPoolKey)
		req.Header.Set("X-Conversation-Id", conv)
		resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		return resp.StatusCode, body.String(), resp.Header.Get("X-Neuronetes-Pod")
	}
	// The gateway learns the tenant and the pool from its informers: retry until it routes.
	var status int
	var body, pod string
	Eventually(t, 3*time.Minute, "the chart's gateway answers conversation 1 of pool deploy-pool", func() (bool, error) {
		status, body, pod = chat("conv-1")
		return status == http.StatusOK, fmt.Errorf("%d %s", status, body)
	})
	ss := sessions()
	if len(ss) != 1 || ss[0].Status.PodName != pod || !strings.Contains(body, "choices") {
		t.Fatalf("after conversation 1 (pod %q, %s): %d sessions %+v; want one, running that pod", pod, body, len(ss), ss)
	}
	if o := metav1.GetControllerOf(&ss[0]); o == nil || o.Kind != "AgentPool" || o.Name != "deploy-pool" {
		t.Fatalf("session %s controlled by %+v, want AgentPool deploy-pool", ss[0].Name, o)
	}
	status, body, _ = chat("conv-2")
	if status != http.StatusTooManyRequests || !strings.Contains(body, "pool_sessions_full") {
		t.Fatalf("a second conversation at spec.maxReplicas 1: %d %s, want 429 pool_sessions_full", status, body)
	}
	if n := len(sessions()); n != 1 {
		t.Fatalf("%d sessions after the refused second conversation, want 1", n)
	}
	t.Logf("the chart's gateway created session %s for conversation 1 (served by pod %s) and refused conversation 2 with 429", ss[0].Name, pod)
}
