package e2e

// Gateway e2e (docs/gateway.md, issue 15): the gateway runs as the chart deploys it (a Deployment
// of 2 replicas behind its Service, RBAC, PDB) in a fresh namespace, in front of a demo-agent pool
// run by the controller (a host process; the webhook injects the sidecar), with the tenants and
// routing policy of deploy/examples/gateway. Every request goes through the Service's ClusterIP
// (kube-proxy), as a client in the cluster would send it.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// Keys of the tenants: team-a and team-b come from deploy/examples/gateway; metered (a tight
// token budget) and load (no quota) are the test's own.
const (
	gweKeyA       = "sk-team-a-ci-4f9c2e"
	gweKeyB       = "sk-team-b-ci-0d77a1"
	gweKeyMetered = "sk-e2e-metered-7c1"
	gweKeyLoad    = "sk-e2e-load-93b"
)

// gweEnv is one namespace with the gateway, the controller and the pools.
type gweEnv struct {
	e     *Env
	ns    string
	base  string // http://<ClusterIP>:80
	addr  string // <ClusterIP>:80
	redis *redistest.Server
	ctl   *ctrlProc
	hc    *http.Client
}

// gweObjects are the test's own objects: the pool serving demo-llm (class chat, the target of
// the example RoutingPolicy), the pool the autoscaling test loads (admission 1 in flight per pod,
// so requests wait in the gateway), and two tenants.
const gweObjects = `
apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata: {name: demo-llm}
spec:
  source: {uri: "file:///models/demo-llm.safetensors"}
  digest: sha256:5c1c1b6d0f2a3e4b8a7c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: chat}
spec:
  modelRef: {name: demo-llm}
  sidecar: {redisAddr: "%[2]s", keysSecretName: sidecar-keys}
  template:
    spec:
      terminationGracePeriodSeconds: 5
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: agent
        image: %[1]s
        imagePullPolicy: Never
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        args: ["--listen=:8000", "--model=demo-llm", "--token-rate=40", "--ttft-base=5ms", "--max-running=64"]
        ports: [{name: http, containerPort: 8000}]
        readinessProbe: {httpGet: {path: /readyz, port: 8000}, periodSeconds: 1}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: chat}
spec:
  agentClassRef: {name: chat}
  replicas: 2
  minReplicas: 2
  maxReplicas: 4
  drainGracePeriodSeconds: 5
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: scaled}
spec:
  sidecar: {inject: false}
  template:
    spec:
      terminationGracePeriodSeconds: 2
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: agent
        image: %[1]s
        imagePullPolicy: Never
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        args: ["--listen=:8000", "--model=scaled", "--token-rate=10", "--ttft-base=5ms"]
        ports: [{name: http, containerPort: 8000}]
        readinessProbe: {httpGet: {path: /readyz, port: 8000}, periodSeconds: 1}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: scaled}
spec:
  agentClassRef: {name: scaled}
  minReplicas: 1
  maxReplicas: 3
  drainGracePeriodSeconds: 2
  autoscaling:
    metrics:
    - {type: tokens-in-queue, target: "200", averagingWindow: 6s}
    behavior:
      scaleUp: {maxChangeAbsolute: 2, periodSeconds: 3}
      scaleDown: {stabilizationWindow: 10m}
---
apiVersion: neuronetes.io/v1alpha1
kind: RoutingPolicy
metadata: {name: scaled}
spec:
  targetRef: {kind: AgentPool, name: scaled}
  admission: {maxInFlightPerEndpoint: 1, maxQueue: 100, queueTimeout: 2m}
---
apiVersion: v1
kind: Secret
metadata:
  name: e2e-keys-metered
  labels: {neuronetes.io/api-keys: "true"}
stringData:
  key: ` + gweKeyMetered + `
---
apiVersion: v1
kind: Secret
metadata:
  name: e2e-keys-load
  labels: {neuronetes.io/api-keys: "true"}
stringData:
  key: ` + gweKeyLoad + `
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: metered}
spec:
  apiKeys: [{secretName: e2e-keys-metered}]
  models: [demo-llm]
  quota: {tokensPerMinute: 600}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: load}
spec:
  apiKeys: [{secretName: e2e-keys-load}]
  models: ["*"]
`

// gweSetup builds the namespace: Redis on the bridge (sidecars, pins, quotas), the controller
// with its autoscaler reading the gateway and publishing the API-key hashes the gateway reads,
// the example tenants and routing policy, the pools, and
// the gateway from the chart. It returns once both gateway replicas are ready and route demo-llm.
func gweSetup(t *testing.T) *gweEnv {
	t.Helper()
	e := requireEnv(t)
	helm := deployHelm(t, e)
	rs := sidecarRedis(t)
	ctrlInstallCRDs(t, e)
	sidecarImg := e.Image(t, "sidecar", "./cmd/sidecar")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.Image(t, "gateway", "./cmd/gateway")
	ns := e.NamespaceWithPodSecurity(t, "gw", "restricted", "")
	sidecarKeys(t, e, ns)
	ctl := startController(t, e, ns, sidecarImg, "--http-addr=0.0.0.0:7070", "--autoscaler=true",
		"--autoscaler-sync-period=3s", "--gateway-pods="+ns+"/app.kubernetes.io/component=gateway", "--gateway-admin-port=9090",
		// The chart's gateway reads the API-key hashes published in its release namespace (ns).
		"--api-key-hashes-namespace="+ns, "--api-key-namespaces="+ns)
	for _, f := range []string{"01-api-keys.yaml", "02-tenants.yaml", "03-routing-policy.yaml"} {
		b, err := os.ReadFile(filepath.Join(e.Root, "deploy", "examples", "gateway", f))
		if err != nil {
			t.Fatal(err)
		}
		e.Apply(t, ns, string(b))
	}
	e.Apply(t, ns, fmt.Sprintf(gweObjects, agentImg, rs.Addr))
	g := &gweEnv{e: e, ns: ns, redis: rs, ctl: ctl, hc: &http.Client{Timeout: 60 * time.Second}}
	g.deploy(t, helm)
	waitPoolReady(t, e, ns, "chat", procLogs(ctl), 2, 4*time.Minute)
	waitPoolReady(t, e, ns, "scaled", procLogs(ctl), 1, 4*time.Minute)
	Eventually(t, time.Minute, "the gateway routes demo-llm to 2 endpoints on both replicas", func() (bool, error) {
		for _, ip := range g.replicaIPs(t) {
			v, err := gweMetric("http://"+net.JoinHostPort(ip, "9090")+"/metrics", "neuronetes_gateway_endpoints", map[string]string{"pool": ns + "/chat"})
			if err != nil || v != 2 {
				return false, fmt.Errorf("replica %s: endpoints %v, %v", ip, v, err)
			}
		}
		return true, nil
	})
	return g
}

// deploy renders the chart's gateway (values/local.yaml plus the gateway's settings for this
// namespace) and applies it; the release name is the namespace, so the cluster-wide RBAC names
// are unique.
func (g *gweEnv) deploy(t *testing.T, helm string) {
	t.Helper()
	vals, _ := json.Marshal(map[string]any{"enabled": true, "replicas": 2, "watchNamespaces": []string{g.ns},
		"redis": map[string]any{"address": g.redis.Addr}, "drainDelaySeconds": 2, "terminationGracePeriodSeconds": 30,
		"logVerbosity": 2, "resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}}})
	cmd := exec.Command(helm, "template", g.ns, filepath.Join(g.e.Root, "deploy", "helm", "neuronetes"), "-n", g.ns,
		"-f", filepath.Join(g.e.Root, "deploy", "helm", "values", "local.yaml"), "--set-json", "gateway="+string(vals),
		"--show-only", "templates/gateway.yaml", "--show-only", "templates/rbac-gateway.yaml")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("helm template: %v %s", err, msg)
	}
	g.e.Apply(t, g.ns, string(out))
	svcName := g.ns + "-neuronetes-gateway"
	Eventually(t, 3*time.Minute, "2 ready gateway replicas", func() (bool, error) {
		ips := g.replicaIPs(t)
		return len(ips) == 2, fmt.Errorf("ready replicas %v; pods:\n%s", ips, g.e.Kubectl(t, "-n", g.ns, "get", "pods", "-l", "app.kubernetes.io/component=gateway", "-o", "wide"))
	})
	svc, err := g.e.Kube.CoreV1().Services(g.ns).Get(context.Background(), svcName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.addr = net.JoinHostPort(svc.Spec.ClusterIP, "80")
	g.base = "http://" + g.addr
	// Ready pods and endpoints do not mean kube-proxy has programmed the ClusterIP yet: wait
	// until the Service path itself answers (any HTTP status; this request carries no key).
	Eventually(t, time.Minute, "the gateway Service answers at "+g.addr, func() (bool, error) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(g.base + "/v1/models")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return true, nil
	})
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := g.e.KubectlErr("-n", g.ns, "logs", "-l", "app.kubernetes.io/component=gateway", "--tail=300", "--prefix")
			t.Logf("gateway logs:\n%s", logs)
		}
	})
}

// replicas returns the ready gateway pods.
func (g *gweEnv) replicas(t *testing.T) []corev1.Pod {
	l, err := g.e.Kube.CoreV1().Pods(g.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=gateway"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && readyCount([]corev1.Pod{p}) == 1 && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out
}

func (g *gweEnv) replicaIPs(t *testing.T) []string {
	var ips []string
	for _, p := range g.replicas(t) {
		ips = append(ips, p.Status.PodIP)
	}
	return ips
}

// gweReply is one answer: status, headers, the streamed (or whole) content and the events.
type gweReply struct {
	status  int
	header  http.Header
	content string
	events  []string
	done    bool // [DONE] arrived
	body    string
	first   time.Duration
	total   time.Duration
}

// send posts a chat completion with key and session through the Service; extra adds body fields.
func (g *gweEnv) send(t *testing.T, key, session string, stream bool, maxTokens int, content string, extra ...string) gweReply {
	t.Helper()
	r, err := g.sendErr(context.Background(), g.hc, key, session, stream, maxTokens, content, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (g *gweEnv) sendErr(ctx context.Context, hc *http.Client, key, session string, stream bool, maxTokens int, content string, extra ...string) (gweReply, error) {
	msg, _ := json.Marshal(content)
	body := fmt.Sprintf(`{"model":"demo-llm","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":%s}]%s}`,
		stream, maxTokens, msg, strings.Join(extra, ""))
	req, _ := http.NewRequestWithContext(ctx, "POST", g.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	if session != "" {
		req.Header.Set("X-Session-Id", session)
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return gweReply{}, err
	}
	defer resp.Body.Close()
	r := gweReply{status: resp.StatusCode, header: resp.Header}
	if !stream || resp.StatusCode != 200 {
		b, err := io.ReadAll(resp.Body)
		r.body, r.total = string(b), time.Since(start)
		return r, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			r.done = true
			break
		}
		if r.first == 0 {
			r.first = time.Since(start)
		}
		r.events = append(r.events, d)
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(d), &c) == nil {
			for _, ch := range c.Choices {
				r.content += ch.Delta.Content
			}
		}
	}
	r.total = time.Since(start)
	return r, sc.Err()
}

// errMetricAbsent: the endpoint exports no series of the metric with the wanted labels.
var errMetricAbsent = errors.New("no such series")

// gweMetric sums the samples of name at url whose labels include want (errMetricAbsent when none).
func gweMetric(url, name string, want map[string]string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && strings.Contains(line, k+`="`+v+`"`)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		var v float64
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s%v at %s: %w", name, want, url, errMetricAbsent)
	}
	return sum, nil
}

// poolPodIP returns the IP of a pool pod by name.
func (g *gweEnv) podIP(t *testing.T, name string) string {
	p, err := g.e.Kube.CoreV1().Pods(g.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}
