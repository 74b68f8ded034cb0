package e2e

// Dispatcher e2e (docs/dispatcher.md): the dispatcher replicas, the gateway and the controller
// run as host processes in cluster mode over a fresh namespace of the local cluster; agents are
// AgentPool pods; NATS (embedded nats-server), Kafka (kfake) and Redis (redis-server) are real
// servers on 127.0.0.1 (Redis also on the bridge, for the ledger agents).

import (
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/queuetest"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// dispProc is cmd/dispatcher run as a host process.
type dispProc struct {
	member, admin, tools string
	cmd                  *exec.Cmd
	exited               chan error
	log                  string
}

// startDispatcher runs one dispatcher replica over ns with the gateway at gwAPI.
func startDispatcher(t *testing.T, e *Env, ns, gwAPI, redisAddr, member string, extra ...string) *dispProc {
	t.Helper()
	bin := e.HostBinary(t, "./cmd/dispatcher")
	d := &dispProc{member: member, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t)), log: filepath.Join(t.TempDir(), member+".log")}
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig", e.Kubeconfig, "--namespaces", ns, "--gateway-url", "http://" + gwAPI,
		"--gateway-dispatch-token-file", dispatchTokenFile(t),
		"--redis-addr", redisAddr, "--redis-prefix", "nn:dispatch:" + ns + ":", "--member", member,
		"--admin-listen", d.admin, "--tool-listen=", "--status-period=1s", "--drain-timeout=5s",
		"--egress-allow-cidrs=" + e2eEgressAllow, "-v=2"}, extra...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = append(os.Environ(), "NEURONETES_GATEWAY_API_KEY="+gatewayAPIKey)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start dispatcher: %v", err)
	}
	d.exited = make(chan error, 1)
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.kill()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			if len(b) > 32000 {
				b = b[len(b)-32000:]
			}
			t.Logf("dispatcher %s log tail:\n%s", member, b)
		}
	})
	Eventually(t, 60*time.Second, "dispatcher "+member+" /readyz", func() (bool, error) {
		resp, err := http.Get("http://" + d.admin + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return d
}

// kill sends SIGKILL and waits for the process.
func (d *dispProc) kill() {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
	}
}

// dispEnv is a namespace with an authenticated gateway, a controller and a Redis reachable from
// pods.
type dispEnv struct {
	e     *Env
	ns    string
	gw    *gwProc
	ctl   *ctrlProc
	redis *redistest.Server
}

// dispSetup starts the gateway and the controller over a fresh namespace; ctlArgs (optional)
// returns more controller flags for the namespace.
func dispSetup(t *testing.T, prefix string, ctlArgs func(e *Env, ns string) []string) *dispEnv {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.NamespaceWithPodSecurity(t, prefix, "restricted", "")
	e.Apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: e2e-keys
  labels: {neuronetes.io/api-keys: "true"}
stringData: {key1: %s}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: dispatcher}
spec:
  apiKeys: [{secretName: e2e-keys}]
  models: ["*"]
`, gatewayAPIKey))
	d := &dispEnv{e: e, ns: ns, redis: bridgeRedis(t)}
	d.gw = startGateway(t, e, ns, "--dispatcher-token-file", dispatchTokenFile(t))
	args := []string{"--webhook=false"}
	if ctlArgs != nil {
		args = append(args, ctlArgs(e, ns)...)
	}
	d.ctl = startController(t, e, ns, "neuronetes.local/no-sidecar:dev", "", args...)
	return d
}

// e2eDispatchToken is the dispatcher's gateway credential in the dispatcher tests (the chart
// makes a random one).
const e2eDispatchToken = "nn-e2e-dispatcher-token-0123456789abcdef"

// dispatchTokenFile writes e2eDispatchToken to a file for --dispatcher-token-file and
// --gateway-dispatch-token-file.
func dispatchTokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dispatch-token")
	if err := os.WriteFile(p, []byte(e2eDispatchToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// bridgeRedis is a redis-server on the cluster bridge (pods and host processes reach it).
func bridgeRedis(t *testing.T) *redistest.Server {
	return redistest.Start(t, redistest.Options{Bind: "10.88.0.1"})
}

var toolBindingGVR = schema.GroupVersionResource{Group: "neuronetes.io", Version: "v1alpha1", Resource: "toolbindings"}

// bindingCondition returns the status, reason and message of a ToolBinding condition.
func bindingCondition(t *testing.T, e *Env, ns, name, typ string) (status, reason, msg string, obj *unstructured.Unstructured) {
	t.Helper()
	u, err := e.Dynamic.Resource(toolBindingGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get toolbinding %s: %v", name, err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == typ {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"]), u
		}
	}
	return "", "", "", u
}

func waitBindingCondition(t *testing.T, e *Env, ns, name, typ, status string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("ToolBinding %s %s=%s", name, typ, status), func() (bool, error) {
		s, r, m, _ := bindingCondition(t, e, ns, name, typ)
		return s == status, fmt.Errorf("%s=%q reason %q: %s", typ, s, r, m)
	})
}

// natsStreams creates the input stream TASKS (subject tasks) and RESULTS (results, dead).
func natsStreams(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	for name, subj := range map[string][]string{"TASKS": {"tasks"}, "RESULTS": {"results", "dead"}} {
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: subj, Duplicates: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

// natsRead returns the messages of subject in RESULTS.
func natsRead(t *testing.T, js jetstream.JetStream, subject string) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, "RESULTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for {
		b, err := c.FetchNoWait(500)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			out = append(out, m)
		}
		if n == 0 {
			return out
		}
	}
}

func natsCount(js jetstream.JetStream, subject string) int {
	s, err := js.Stream(context.Background(), "RESULTS")
	if err != nil {
		return -1
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		return -1
	}
	return int(info.State.Subjects[subject])
}

const dispNATSYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: workers}
spec:
  modelRef: {name: queue-llm}
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
          args: ["--listen=:8000", "--max-running=4", "--token-rate=40", "--default-max-tokens=8", "--ttft-base=20ms"]
          ports: [{name: http, containerPort: 8000}]
          readinessProbe:
            httpGet: {path: /readyz, port: 8000}
            periodSeconds: 1
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: workers}
spec:
  agentClassRef: {name: workers}
  replicas: 1
  minReplicas: 1
  maxReplicas: 3
  autoscaling: {}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: a-workers}
spec:
  agentClassRef: {name: workers}
  replicas: 1
  minReplicas: 1
  maxReplicas: 1
---
apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: tasks}
spec:
  type: queue
  agentPoolRef: {name: workers}
  queueConfig:
    provider: nats
    queueName: TASKS
    autoscaleOnLag: true
    maxLagThreshold: 20
    prefetchCount: 4
    dispatch:
      responseQueue: results
      deadLetterQueue: dead
      maxRetries: 2
      initialBackoff: 200ms
      maxBackoff: 1s
      timeout: 30s
`

// TestDispatcherNATS: 500 messages on a NATS JetStream subject are processed by a demo-agent
// AgentPool through the gateway by two dispatcher replicas; every result arrives once on the
// response subject with its ids; the pool scales up on the queue's lag while it drains; a poison
// message (a request the gateway refuses with a 400) lands in the dead-letter subject at once
// with the error attached; the binding's status says Ready, counts the work and is Degraded by
// the dead letter.
func TestDispatcherNATS(t *testing.T) {
	url := queuetest.StartNATS(t)
	js := natsStreams(t, url)
	d := dispSetup(t, "disp-nats", func(e *Env, ns string) []string {
		args, _, _, _ := asControllerArgs(t, e, ns, url)
		return args
	})
	e, ns := d.e, d.ns
	e.Apply(t, ns, fmt.Sprintf(dispNATSYAML, e.Image(t, "demo-agent", "./cmd/demo-agent")))
	guardPoolReady(t, e, ns, "workers", 1)
	// a-workers serves the same model and sorts first: the gateway must still serve the
	// binding by its agentPoolRef, workers.
	guardPoolReady(t, e, ns, "a-workers", 1)
	targetPoolIsTheDispatchers(t, d.gw.api, ns)
	for _, m := range []string{"d-a", "d-b"} {
		startDispatcher(t, e, ns, d.gw.api, d.redis.Addr, m, "--nats-url", url)
	}
	waitBindingCondition(t, e, ns, "tasks", "Ready", "True", 60*time.Second)
	ctx := context.Background()
	const n = 500
	for i := 0; i < n; i++ {
		m := nats.NewMsg("tasks")
		m.Data = []byte(fmt.Sprintf("summarize ticket %d", i))
		m.Header.Set(queue.HeaderKey, fmt.Sprintf("customer-%d", i%25))
		m.Header.Set(queue.HeaderCorrelationID, fmt.Sprintf("corr-%d", i))
		if i == 250 {
			m.Data = []byte(`{"messages":"this is not a list of messages"}`)
		}
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("msg-%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	maxReplicas := int64(1)
	Eventually(t, 8*time.Minute, "500 messages answered or dead-lettered", func() (bool, error) {
		maxReplicas = max(maxReplicas, asReplicas(t, e, ns, "workers"))
		r, dl := natsCount(js, "results"), natsCount(js, "dead")
		return r+dl >= n, fmt.Errorf("%d results, %d dead letters, pool at %d replicas", r, dl, maxReplicas)
	})
	t.Logf("[e2e] 500 messages through the gateway in %s; the pool reached %d replicas", time.Since(start).Round(time.Second), maxReplicas)
	if maxReplicas < 2 {
		t.Errorf("the pool never scaled above 1 replica while the queue drained")
	}
	time.Sleep(2 * time.Second) // late copies, if any, would arrive now
	seen := map[string]int{}
	for _, m := range natsRead(t, js, "results") {
		h := m.Headers()
		id := h.Get(queue.HeaderMessageID)
		seen[id]++
		var i int
		fmt.Sscanf(id, "msg-%d", &i)
		if h.Get(queue.HeaderCorrelationID) != fmt.Sprintf("corr-%d", i) || h.Get(queue.HeaderRequestID) == "" || h.Get(queue.HeaderPod) == "" ||
			h.Get(queue.HeaderPool) != ns+"/workers" ||
			!bytes.Contains(m.Data(), []byte(`"choices"`)) {
			t.Fatalf("result %s: headers %v body %.200s", id, h, m.Data())
		}
	}
	if len(seen) != n-1 {
		t.Errorf("%d distinct results, want %d", len(seen), n-1)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("result of %s published %d times", id, c)
		}
	}
	dead := natsRead(t, js, "dead")
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	h := dead[0].Headers()
	if h.Get(queue.HeaderMessageID) != "msg-250" || h.Get(queue.HeaderAttempts) != "1" || !strings.Contains(h.Get(queue.HeaderError), "gateway 400") ||
		!strings.Contains(string(dead[0].Data()), "not a list") {
		t.Fatalf("dead letter headers %v body %s", h, dead[0].Data())
	}
	t.Logf("[e2e] dead letter: attempts=%s error=%q", h.Get(queue.HeaderAttempts), h.Get(queue.HeaderError))
	Eventually(t, 30*time.Second, "status counts and conditions", func() (bool, error) {
		_, _, _, u := bindingCondition(t, e, ns, "tasks", "Ready")
		ok, _, _ := unstructured.NestedInt64(u.Object, "status", "dispatch", "succeeded")
		dl, _, _ := unstructured.NestedInt64(u.Object, "status", "dispatch", "deadLettered")
		ds, dr, dm, _ := bindingCondition(t, e, ns, "tasks", "Degraded")
		return ok == n-1 && dl == 1 && ds == "True" && dr == "MessagesDeadLettered", fmt.Errorf("succeeded %d dead %d Degraded %s %s: %s", ok, dl, ds, dr, dm)
	})
}

// TestDispatcherToolProxy: an http tool with a JSON Schema is called through the dispatcher's
// tool proxy from a pod of an allowed pool: good arguments reach the tool; arguments that fail
// the schema are refused with an error naming the problem and an audit entry without the values;
// a pod of another pool is refused; the binding is Ready (ToolServed).
func TestDispatcherToolProxy(t *testing.T) {
	d := dispSetup(t, "disp-tools", nil)
	e, ns := d.e, d.ns
	// The examples pass the API's validation (a server-side dry run); the rejected one does not.
	examples, _ := filepath.Glob(filepath.Join(e.Root, "deploy", "examples", "toolbindings", "*.yaml"))
	for _, f := range examples {
		out, err := e.KubectlErr("apply", "--dry-run=server", "-n", ns, "-f", f)
		if rejected := strings.HasPrefix(filepath.Base(f), "90-rejected-"); rejected != (err != nil) {
			t.Fatalf("dry run of %s: %v\n%s", filepath.Base(f), err, out)
		}
	}
	var toolCalls atomic.Int64
	tool := &http.Server{Addr: fmt.Sprintf("10.88.0.1:%d", freePort(t)), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toolCalls.Add(1)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, `{"weather":"sunny","for":%s}`, b)
	})}
	go func() { _ = tool.ListenAndServe() }()
	t.Cleanup(func() { _ = tool.Close() })
	img := e.Image(t, "ledger-agent", "./e2e/cmd/ledger-agent")
	e.Apply(t, ns, poolManifest("callers", "m1", img, 1)+"---\n"+poolManifest("others", "m2", img, 1)+fmt.Sprintf(`---
apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: weather}
spec:
  type: http
  endpoint: http://%s/forecast
  agentPoolRef: {name: callers}
  tool:
    timeout: 5s
    parameters:
      type: object
      required: [city]
      additionalProperties: false
      properties:
        city: {type: string, minLength: 2}
        days: {type: integer, minimum: 1, maximum: 7}
`, tool.Addr))
	toolAddr := fmt.Sprintf("10.88.0.1:%d", freePort(t))
	dp := startDispatcher(t, e, ns, d.gw.api, d.redis.Addr, "d-a", "--tool-listen", toolAddr)
	waitBindingCondition(t, e, ns, "weather", "Ready", "True", 60*time.Second)
	if _, r, _, _ := bindingCondition(t, e, ns, "weather", "Ready"); r != "ToolServed" {
		t.Fatalf("Ready reason %q, want ToolServed", r)
	}
	guardPoolReady(t, e, ns, "callers", 1)
	guardPoolReady(t, e, ns, "others", 1)
	call := func(pool, args string) (int, string) {
		pods := poolPods(t, e, ns, pool)["serving"]
		body, _ := json.Marshal(map[string]any{"url": "http://" + toolAddr + "/v1/tools/" + ns + "/weather", "arguments": json.RawMessage(args)})
		resp, err := http.Post("http://"+pods[0].Status.PodIP+":8000/call", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("call from %s: %v", pool, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var st int
		fmt.Sscanf(resp.Header.Get("X-Tool-Status"), "%d", &st)
		return st, string(b)
	}
	if st, b := call("callers", `{"city":"Lyon","days":2}`); st != 200 || !strings.Contains(b, `"weather":"sunny"`) {
		t.Fatalf("allowed call: %d %s", st, b)
	}
	st, b := call("callers", `{"city":"Atlantis-Secret","days":30}`)
	if st != 400 || !strings.Contains(b, `"code":"schema_violation"`) || !strings.Contains(b, "/days") || !strings.Contains(b, "spec.tool.parameters") {
		t.Fatalf("schema-failing call: %d %s", st, b)
	}
	t.Logf("[e2e] refused: %s", b)
	if st, b := call("others", `{"city":"Lyon"}`); st != 403 || !strings.Contains(b, "forbidden_tool") {
		t.Fatalf("call from a pool not allowed: %d %s", st, b)
	}
	if n := toolCalls.Load(); n != 1 {
		t.Fatalf("the tool was called %d times, want 1", n)
	}
	resp, err := http.Get("http://" + dp.admin + "/audit?tool=weather")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var audit struct {
		Entries []struct {
			Pool, Outcome string
			Status        int
			ArgBytes      int `json:"argumentBytes"`
			Violations    []struct{ Location, Keyword string }
		}
	}
	if err := json.Unmarshal(raw, &audit); err != nil || len(audit.Entries) != 3 {
		t.Fatalf("audit: %v %s", err, raw)
	}
	refused := audit.Entries[1]
	if refused.Outcome != "refused_schema" || refused.Pool != "callers" || refused.Status != 400 || refused.ArgBytes == 0 || len(refused.Violations) == 0 {
		t.Fatalf("audit entry of the refused call: %+v", refused)
	}
	if strings.Contains(string(raw), "Atlantis") || strings.Contains(string(raw), "Lyon") {
		t.Fatalf("the audit holds argument values: %s", raw)
	}
	if audit.Entries[2].Outcome != "refused_auth" || audit.Entries[2].Pool != "others" {
		t.Fatalf("audit entry of the refused pool: %+v", audit.Entries[2])
	}
}

// targetPoolIsTheDispatchers: a Tenant's key that names a pool, as the dispatcher does, is
// refused (403 forbidden_target_pool) and reaches no pod; the dispatcher's credential with it
// is served by that pool.
func targetPoolIsTheDispatchers(t *testing.T, gwAPI, ns string) {
	t.Helper()
	body := `{"model":"queue-llm","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		cred, pool string
		status     int
	}{{gatewayAPIKey, ns + "/a-workers", 403}, {e2eDispatchToken, ns + "/a-workers", 200}} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+gwAPI+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tc.cred)
		req.Header.Set("X-Neuronetes-Target-Pool", tc.pool)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || tc.status == 403 && !strings.Contains(string(b), "forbidden_target_pool") {
			t.Fatalf("credential %.6s... naming %s: %d %s, want %d", tc.cred, tc.pool, resp.StatusCode, b, tc.status)
		}
		if tc.status == 200 && resp.Header.Get("X-Neuronetes-Pool") != tc.pool {
			t.Fatalf("served by %q, want %s", resp.Header.Get("X-Neuronetes-Pool"), tc.pool)
		}
	}
}
