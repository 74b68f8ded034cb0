package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/internal/testreq"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// sidecarPod is an agent replica: the demo agent plus the sidecar container,
// written out explicitly (the same container, env and mounts the controller's
// webhook injects), so the test does not depend on the webhook being
// deployed. The sidecar listens on 0.0.0.0:7070 here so that the test can
// also read sessions through each replica's sidecar; agents use 127.0.0.1.
const sidecarPod = `
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  labels: {app: sidecar-e2e}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 2
  volumes:
  - name: neuronetes-run
    emptyDir: {}
  - name: neuronetes-keys
    secret: {secretName: sidecar-keys}
  containers:
  - name: agent
    image: %[2]s
    imagePullPolicy: Never
    args: ["--listen=:8000", "--ttft-base=1ms", "--token-rate=1000"]
    env:
    - {name: NEURONETES_SIDECAR_URL, value: "http://127.0.0.1:7070"}
    - {name: NEURONETES_SIDECAR_SOCKET, value: /var/run/neuronetes/sidecar.sock}
    volumeMounts:
    - {name: neuronetes-run, mountPath: /var/run/neuronetes}
  - name: neuronetes-sidecar
    image: %[3]s
    imagePullPolicy: Never
    args: ["--http-addr=0.0.0.0:7070", "-v=2"]
    env:
    - {name: NEURONETES_REDIS_ADDR, value: "%[4]s"}
    - {name: NEURONETES_KEYS_DIR, value: /etc/neuronetes/keys}
    - name: NEURONETES_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    volumeMounts:
    - {name: neuronetes-run, mountPath: /var/run/neuronetes}
    - {name: neuronetes-keys, mountPath: /etc/neuronetes/keys, readOnly: true}
`

// TestSidecarConversationAcrossReplicas: two agent replicas with the sidecar
// share one Redis (on the bridge gateway); turn 1 goes to replica A, turn 2 to
// replica B, and both sidecars then return the whole conversation, while
// Redis holds only ciphertext.
func TestSidecarConversationAcrossReplicas(t *testing.T) {
	e := requireEnv(t)
	rs := sidecarRedis(t)
	sidecarImg := e.Image(t, "sidecar", "./cmd/sidecar")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	ns := e.Namespace(t, "sidecar-e2e")

	sidecarKeys(t, e, ns)
	e.Apply(t, ns, fmt.Sprintf(sidecarPod, "replica-a", agentImg, sidecarImg, rs.Addr)+"---\n"+
		fmt.Sprintf(sidecarPod, "replica-b", agentImg, sidecarImg, rs.Addr))
	sidecarConversation(t, e, ns, rs.Addr, "replica-a", "replica-b")
}

// sidecarConversation sends turn 1 to replica a's agent and turn 2 to replica
// b's, then checks that both replicas' sidecars return the whole conversation
// in order and that Redis holds only the sealed frame.
func sidecarConversation(t *testing.T, e *Env, ns, redisAddr, podA, podB string) {
	t.Helper()
	a := e.WaitPodRunning(t, ns, podA, 3*time.Minute)
	b := e.WaitPodRunning(t, ns, podB, 3*time.Minute)
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, p := range []string{a.Status.PodIP, b.Status.PodIP} {
		Eventually(t, time.Minute, "sidecar and agent on "+p, func() (bool, error) {
			for _, port := range []string{"7070", "8000"} {
				resp, err := hc.Get("http://" + net.JoinHostPort(p, port) + "/healthz")
				if err != nil {
					return false, err
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					return false, fmt.Errorf("%s:%s healthz %d", p, port, resp.StatusCode)
				}
			}
			return true, nil
		})
	}

	const conv = "conv-e2e-1"
	chat := func(ip, content string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "demo-model", "max_tokens": 4,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		req, _ := http.NewRequest("POST", "http://"+net.JoinHostPort(ip, "8000")+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("X-Conversation-ID", conv)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("chat to %s: %v", ip, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("chat to %s: %d %s", ip, resp.StatusCode, b)
		}
	}
	chat(a.Status.PodIP, "first turn served by replica a")
	chat(b.Status.PodIP, "second turn served by replica b")

	type turn struct{ Role, Content string }
	for _, p := range []string{a.Status.PodIP, b.Status.PodIP} {
		resp, err := hc.Get("http://" + net.JoinHostPort(p, "7070") + "/v1/sessions/" + conv)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ Turns []turn }
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("session via sidecar %s: %d %v", p, resp.StatusCode, err)
		}
		var users []string
		for _, tr := range doc.Turns {
			if tr.Role == "user" {
				users = append(users, tr.Content)
			}
		}
		if len(doc.Turns) != 4 || len(users) != 2 || users[0] != "first turn served by replica a" || users[1] != "second turn served by replica b" {
			t.Fatalf("conversation via %s = %+v; want user/assistant turns from both replicas in order", p, doc.Turns)
		}
	}
	// At rest, Redis holds only the sealed frame under the tenant's namespace.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	raw, err := rdb.HGet(context.Background(), "nn:{"+ns+"}:sess:"+conv, "d").Bytes()
	if err != nil {
		t.Fatalf("raw session in redis: %v", err)
	}
	if bytes.Contains(raw, []byte("replica")) || !bytes.HasPrefix(raw, []byte("NF")) {
		t.Fatalf("session at rest is not a sealed frame (%d bytes)", len(raw))
	}
}

// sidecarRedis starts a private redis-server on the cluster bridge gateway,
// where pods reach it, with a random port.
func sidecarRedis(t *testing.T) *redistest.Server {
	t.Helper()
	found := false
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			found = found || strings.HasPrefix(a.String(), "10.88.0.1/")
		}
	}
	if !found {
		testreq.Tool(t, "the cluster bridge", "gateway 10.88.0.1 not present")
	}
	return redistest.Start(t, redistest.Options{Bind: "10.88.0.1"})
}

// sidecarKeys creates the tenant's key Secret "sidecar-keys" in ns.
func sidecarKeys(t *testing.T, e *Env, ns string) {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: sidecar-keys}
stringData:
  active: k1
  k1: %s
`, base64.StdEncoding.EncodeToString(key)))
}

// sidecarInjectedPod is a bare agent pod of AgentClass "mem"; the
// controller's webhook adds the sidecar.
const sidecarInjectedPod = `
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  labels: {neuronetes.io/agentclass: mem}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: agent
    image: %[2]s
    imagePullPolicy: Never
    args: ["--listen=:8000", "--ttft-base=1ms", "--token-rate=1000"]
%[3]s`

// guaranteedAgent makes sidecarInjectedPod's agent container Guaranteed.
const guaranteedAgent = `    resources:
      limits: {cpu: 200m, memory: 256Mi}
`

// TestSidecarInjectedConversation is the same conversation with the sidecar
// injected by the controller's webhook: an AgentClass names the Redis address
// and the keys Secret, and two agent pods of that class carry no sidecar of
// their own. The injected sidecar is told (--sidecar-args) to listen on all
// interfaces so the test can read sessions through it. inj-b's agent is
// Guaranteed, and the API server must still classify the pod Guaranteed with
// the sidecar in it; inj-a's sidecar gets the default resources.
func TestSidecarInjectedConversation(t *testing.T) {
	e := requireEnv(t)
	rs := sidecarRedis(t)
	ctrlInstallCRDs(t, e)
	sidecarImg := e.Image(t, "sidecar", "./cmd/sidecar")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	ns := e.Namespace(t, "sidecar-inj")
	sidecarKeys(t, e, ns)
	startController(t, e, ns, sidecarImg, "--http-addr=0.0.0.0:7070")
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: mem}
spec:
  sidecar: {redisAddr: "%s", keysSecretName: sidecar-keys}
  template:
    spec:
      containers:
      - name: agent
        image: %s
`, rs.Addr, agentImg))
	e.Apply(t, ns, fmt.Sprintf(sidecarInjectedPod, "inj-a", agentImg, "")+"---\n"+fmt.Sprintf(sidecarInjectedPod, "inj-b", agentImg, guaranteedAgent))
	for _, tc := range []struct {
		name    string
		qos     corev1.PodQOSClass
		cpuReq  string
		memLim  string
		hasCPUL bool
	}{
		{"inj-a", corev1.PodQOSBurstable, "100m", "1Gi", false},
		{"inj-b", corev1.PodQOSGuaranteed, "100m", "1Gi", true},
	} {
		p := e.WaitPodRunning(t, ns, tc.name, 3*time.Minute)
		var sc *corev1.Container
		for i := range p.Spec.InitContainers {
			if p.Spec.InitContainers[i].Image == sidecarImg {
				sc = &p.Spec.InitContainers[i]
			}
		}
		if sc == nil || sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Fatalf("pod %s has no injected native sidecar (an init container with restartPolicy Always): %+v", tc.name, p.Spec.InitContainers)
		}
		_, hasCPULimit := sc.Resources.Limits[corev1.ResourceCPU]
		if p.Status.QOSClass != tc.qos || sc.Resources.Requests.Cpu().String() != tc.cpuReq ||
			sc.Resources.Limits.Memory().String() != tc.memLim || hasCPULimit != tc.hasCPUL {
			t.Errorf("pod %s: QoS %s, sidecar resources %v; want QoS %s, CPU request %s, memory limit %s, CPU limit %v",
				tc.name, p.Status.QOSClass, sc.Resources, tc.qos, tc.cpuReq, tc.memLim, tc.hasCPUL)
		}
		gomax := ""
		for _, env := range sc.Env {
			if env.Name == "GOMAXPROCS" {
				gomax = env.Value
			}
		}
		if gomax != "2" {
			t.Errorf("pod %s: sidecar GOMAXPROCS %q, want 2", tc.name, gomax)
		}
	}
	sidecarConversation(t, e, ns, rs.Addr, "inj-a", "inj-b")
	sidecarReadyFirst(t, e, ns, sidecarImg)
}

// sidecarReadyFirst: an agent whose very first act is one request to the injected sidecar (the
// sidecar binary's own probe mode, run as the agent container, restartPolicy Never) succeeds,
// because the native sidecar's startup probe holds the agent back until the sidecar answers. As an
// ordinary container the sidecar would start beside the agent, and the request would race it.
func sidecarReadyFirst(t *testing.T, e *Env, ns, sidecarImg string) {
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: first-request
  labels: {neuronetes.io/agentclass: mem}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: agent
    image: %s
    imagePullPolicy: Never
    command: ["/sidecar", "probe", "http://127.0.0.1:7070/healthz"]
`, sidecarImg))
	Eventually(t, 2*time.Minute, "the first-request agent to finish", func() (bool, error) {
		p, err := e.Kube.CoreV1().Pods(ns).Get(context.Background(), "first-request", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return true, nil
		case corev1.PodFailed:
			logs, _ := e.KubectlErr("logs", "-n", ns, "first-request", "-c", "agent")
			t.Fatalf("the agent's first request to the sidecar failed (the sidecar was not ready): %s", logs)
		}
		return false, fmt.Errorf("phase %s", p.Status.Phase)
	})
	t.Logf("[e2e] an agent's first request found the native sidecar ready")
}
