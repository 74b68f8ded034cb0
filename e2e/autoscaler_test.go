package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	nnwebhook "github.com/neuronetes/neuronetes/controller/webhook"
	"github.com/neuronetes/neuronetes/e2e/kube"
)

// asControllerArgs are the flags that run the shipped controller's autoscaling loop with a short
// sync period, its /v1/scale webhook over TLS on a free loopback port with the returned bearer
// token (scoped to ns; "other-token" is scoped to another namespace) and an HTTPS client that
// trusts its CA, and natsURL as the default NATS server. On failure the pools' Events of ns are
// logged.
func asControllerArgs(t *testing.T, e *Env, ns, natsURL string) (args []string, webhookAddr, token string, hc *http.Client) {
	t.Helper()
	token = "e2e-token"
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "scale-tokens")
	if err := os.WriteFile(tokFile, []byte(ns+" "+token+"\nsome-other-ns other-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "scale-certs")
	caPEM, err := nnwebhook.EnsureCerts(certDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	webhookAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args = []string{"--autoscaler=true", "--autoscaler-sync-period=3s", "--scale-webhook-addr=" + webhookAddr,
		"--scale-webhook-tokens-file=" + tokFile, "--scale-webhook-cert-dir=" + certDir, "--nats-url=" + natsURL}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		evs, _ := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "AgentPool" {
				t.Logf("event %s %s: %s", ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
	})
	return args, webhookAddr, token, hc
}

// waitEvents waits up to timeout until the pool's Events ("Reason: message") contain every one
// of wants, and returns them joined by newlines; on a timeout it reports the missing ones. The
// controller records an Event after the write it describes, through an asynchronous
// broadcaster, so a test that saw the write may list the Events before it arrives.
func waitEvents(t *testing.T, e *Env, ns, pool string, timeout time.Duration, wants ...string) string {
	t.Helper()
	var evs string
	err := kube.WaitFor(context.Background(), timeout, "the Events of pool "+pool, func() (bool, error) {
		evs = strings.Join(asEvents(t, e, ns, pool), "\n")
		var missing []string
		for _, want := range wants {
			if !strings.Contains(evs, want) {
				missing = append(missing, want)
			}
		}
		return len(missing) == 0, fmt.Errorf("lacking %q in:\n%s", missing, evs)
	})
	if err != nil {
		t.Error(err)
	}
	return evs
}

// asEvents returns "Reason: message" of the pool's Events.
func asEvents(t *testing.T, e *Env, ns, pool string) []string {
	l, err := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pool})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	var out []string
	for _, ev := range l.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return out
}

func asReplicas(t *testing.T, e *Env, ns, pool string) int64 {
	u, err := e.Dynamic.Resource(ctrlPoolGVR).Namespace(ns).Get(context.Background(), pool, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pool: %v", err)
	}
	spec, _ := u.Object["spec"].(map[string]any)
	n, _ := spec["replicas"].(int64)
	return n
}

// asLoad keeps `clients` chat requests in flight, spread over the pool's serving pods.
func asLoad(e *Env, ns, pool string, clients int) (stop func()) {
	var ips atomic.Value
	ips.Store([]string{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			// Not poolPods: t.Fatal must not be called off the test goroutine.
			l, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=" + pool + "," + nnv1.StateLabel + "=" + nnv1.PodStateServing})
			if err == nil {
				var cur []string
				for _, p := range l.Items {
					if p.Status.PodIP != "" && p.DeletionTimestamp == nil && readyCount([]corev1.Pod{p}) == 1 {
						cur = append(cur, p.Status.PodIP)
					}
				}
				ips.Store(cur)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	body := `{"messages":[{"role":"user","content":"load"}],"max_tokens":60}`
	hc := &http.Client{Timeout: 30 * time.Second}
	for i := range clients {
		wg.Go(func() {
			for n := i; ctx.Err() == nil; n++ {
				cur := ips.Load().([]string)
				if len(cur) == 0 {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+net.JoinHostPort(cur[n%len(cur)], "8000")+"/v1/chat/completions", bytes.NewBufferString(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

const asPoolYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: demo
spec:
  agentClassRef: {name: demo}
  minReplicas: 1
  maxReplicas: 4
  prewarmPercent: 25
  drainGracePeriodSeconds: 5
  autoscaling:
    useWarmPool: true
    replenishStrategy: {delay: 5s, batchSize: 1}
    metrics:
      - {type: queue-depth, target: "2", averagingWindow: 6s}
    behavior:
      scaleUp: {maxChangePercent: 100, maxChangeAbsolute: 4, periodSeconds: 15}
      scaleDown: {stabilizationWindow: 20s, maxChangePercent: 100, periodSeconds: 15}
`

// TestAutoscalerScalesPoolOnLoad: load from a small generator against demo agents (4 running
// per pod, the rest queued) makes the autoscaler scale the pool up, through the warm pool first,
// then back down to the minimum after the 20 s stabilization once the load stops; every change
// is an Event with its reason. A /v1/scale request over HTTP then overrides the count.
func TestAutoscalerScalesPoolOnLoad(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "as-load")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	asArgs, hookAddr, token, hc := asControllerArgs(t, e, ns, "")
	ctl := startController(t, e, ns, agentImg, "--listen=127.0.0.1:7070 --model=sidecar-standin", asArgs...)
	e.Apply(t, ns, fmt.Sprintf(ctrlClassYAML, agentImg))
	e.Apply(t, ns, asPoolYAML)

	waitPool(t, e, ns, "demo", procLogs(ctl), 3*time.Minute, "1 serving and 1 warm Ready pod", func() (bool, error) {
		p := poolPods(t, e, ns, "demo")
		return readyCount(p["serving"]) == 1 && readyCount(p["warm"]) == 1, fmt.Errorf("serving %d warm %d", readyCount(p["serving"]), readyCount(p["warm"]))
	})
	warmBefore := podNames(poolPods(t, e, ns, "demo")["warm"])

	// 24 clients: on 4 pods, 4 run and 2 wait per pod, the queue-depth target, so the load holds 4.
	stop := asLoad(e, ns, "demo", 24)
	waitPool(t, e, ns, "demo", procLogs(ctl), 90*time.Second, "scaled up to 4 by load", func() (bool, error) {
		return asReplicas(t, e, ns, "demo") == 4, fmt.Errorf("spec.replicas %d", asReplicas(t, e, ns, "demo"))
	})
	// The warm pod was activated rather than a cold one started.
	serving := strings.Join(podNames(poolPods(t, e, ns, "demo")["serving"]), ",")
	for _, w := range warmBefore {
		if !strings.Contains(serving, w) {
			t.Errorf("warm pod %s not among serving pods %s after scale-up", w, serving)
		}
	}
	waitPool(t, e, ns, "demo", procLogs(ctl), 2*time.Minute, "4 serving Ready pods", func() (bool, error) {
		p := poolPods(t, e, ns, "demo")
		return readyCount(p["serving"]) == 4, fmt.Errorf("serving ready %d", readyCount(p["serving"]))
	})
	stop()
	idle := time.Now()
	waitPool(t, e, ns, "demo", procLogs(ctl), 2*time.Minute, "scaled back down to 1", func() (bool, error) {
		return asReplicas(t, e, ns, "demo") == 1, fmt.Errorf("spec.replicas %d", asReplicas(t, e, ns, "demo"))
	})
	if d := time.Since(idle); d < 20*time.Second {
		t.Errorf("scaled down %s after the load stopped, before the 20s stabilization window", d)
	}
	evs := waitEvents(t, e, ns, "demo", 30*time.Second, "ScaledUp: 1 -> ", "ScaledDown: ", "queue-depth", "from warm 1")
	t.Logf("events:\n%s", evs)

	// POST /v1/scale over TLS to the controller's scale webhook with the bearer token overrides
	// the decision at once (the override is stored on the pool; the loop's watch sees it).
	post := func(token, pool string) int {
		req, _ := http.NewRequest(http.MethodPost, "https://"+hookAddr+"/v1/scale",
			strings.NewReader(`{"pool":"`+pool+`","replicas":3,"reason":"traffic-spike-detected","ttlSeconds":60}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		token, pool string
		want        int
	}{{"wrong", "demo", http.StatusUnauthorized}, {token, "no-such-pool", http.StatusNotFound}} {
		if c := post(tc.token, tc.pool); c != tc.want {
			t.Fatalf("token %q pool %s: %d, want %d", tc.token, tc.pool, c, tc.want)
		}
	}
	if c := post("other-token", "demo"); c != http.StatusNotFound {
		t.Fatalf("a token of another namespace: %d", c)
	}
	sent := time.Now()
	if c := post(token, "demo"); c != http.StatusAccepted {
		t.Fatalf("scale webhook: %d", c)
	}
	waitPool(t, e, ns, "demo", procLogs(ctl), 30*time.Second, "override to 3", func() (bool, error) {
		return asReplicas(t, e, ns, "demo") == 3, fmt.Errorf("spec.replicas %d", asReplicas(t, e, ns, "demo"))
	})
	t.Logf("[e2e] /v1/scale override applied to spec.replicas %s after the 202 (sync period 3s)", time.Since(sent).Round(time.Millisecond))
}

const asLagYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: workers
spec:
  agentClassRef: {name: demo}
  replicas: 1
  minReplicas: 1
  maxReplicas: 3
  autoscaling: {}
---
apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata:
  name: tasks
spec:
  type: queue
  agentPoolRef: {name: workers}
  queueConfig:
    provider: nats
    queueName: agent-tasks
    autoscaleOnLag: true
    maxLagThreshold: 10
    prefetchCount: 10
`

// TestAutoscalerScalesPoolOnNATSLag: a ToolBinding with autoscaleOnLag on a real JetStream
// work queue (nats-server on 127.0.0.1) scales its pool by the seed formula, and back when
// the queue is drained.
func TestAutoscalerScalesPoolOnNATSLag(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "as-lag")
	ctx := context.Background()
	s, js, stream := taskQueue(t)
	// The ToolBinding names no URL: the controller's --nats-url is used. No pods are needed (the
	// pool's class does not exist): the pool is scaled on lag alone.
	asArgs, _, _, _ := asControllerArgs(t, e, ns, s.ClientURL())
	ctl := startController(t, e, ns, "neuronetes.local/sidecar:dev", "", append(asArgs, "--webhook=false")...)
	e.Apply(t, ns, asLagYAML)
	for i := range 25 {
		if _, err := js.Publish(ctx, "tasks", fmt.Appendf(nil, "task-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// 1 + ceil((25 - 1*10) / 10) = 3
	waitPool(t, e, ns, "workers", procLogs(ctl), 30*time.Second, "scaled to 3 on lag 25", func() (bool, error) {
		return asReplicas(t, e, ns, "workers") == 3, fmt.Errorf("spec.replicas %d", asReplicas(t, e, ns, "workers"))
	})
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	waitPool(t, e, ns, "workers", procLogs(ctl), 30*time.Second, "back to 1 on an empty queue", func() (bool, error) {
		return asReplicas(t, e, ns, "workers") == 1, fmt.Errorf("spec.replicas %d", asReplicas(t, e, ns, "workers"))
	})
	waitEvents(t, e, ns, "workers", 30*time.Second, "QueueLag")
}

// taskQueue starts a nats-server with JetStream on 127.0.0.1 (stopped when the test ends) and
// creates the work-queue stream "agent-tasks" on subject "tasks" that asLagYAML's ToolBinding
// reads.
func taskQueue(t *testing.T) (*server.Server, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "agent-tasks", Subjects: []string{"tasks"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	return s, js, stream
}
