package e2e

// The simulator-vs-cluster check of the adaptive autoscaler (docs/autoscaling.md): a few minutes
// of a trace replayed through the gateway into a pool of demo agents scaled by the controller's
// own loop, against what controller/scalesim predicts for the same requests, replica model and
// AgentPool spec.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scaleloop"
	"github.com/neuronetes/neuronetes/controller/scalesim"
)

// The replica model the demo agents run, in the simulator's terms: one prefill at a time at
// simPrefill words/s, simSlots sequences, simDecode tokens/s each, requests beyond the slots
// queued in the pod (the gateway forwards at once, so the pods' queue metrics see the backlog),
// and a load time before readiness; the controller decides every 3 s (asControllerArgs).
const (
	simPrefill, simDecode, simSlots = 4000.0, 20.0, 8
	simReadyDelay                   = 10 * time.Second
	simSync                         = 3 * time.Second
	simMaxReplicas                  = 8
)

// The stated tolerance of the check.
const (
	simAttainmentTolerance = 0.05 // absolute, on the share of requests within the SLO
	simCostTolerance       = 0.35 // relative, on the pool's replica-seconds
	simPeakTolerance       = 1    // replicas, on the most replicas at once
)

// simTrace is the synthetic ramp trace (seed 1) over 6 minutes: 3 requests/s rising to 12 over
// the second quarter, a plateau, and back over the last quarter, with prompts halved and outputs a
// fifth (at least 1 token) so that the machine's two cores carry the stream.
func simTrace(t *testing.T) scalesim.Trace {
	tr, err := scalesim.Synthetic("ramp", 1, 6*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr.Requests {
		r := &tr.Requests[i]
		r.In, r.Out = max(r.In/2, 1), max(r.Out/5, 1)
	}
	tr.Name = "ramp-1-6min"
	return tr
}

// simAPIKey is the API key of the test's Tenant (an anonymous caller sees no namespace's models).
const simAPIKey = "nn-e2e-autoscaler-sim-key"

var simTenantYAML = fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: sim-keys
  labels: {neuronetes.io/api-keys: "true"}
stringData: {key1: %s}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: sim}
spec:
  apiKeys: [{secretName: sim-keys}]
  models: ["*"]
`, simAPIKey)

func simManifests(image string, slo time.Duration) string {
	return fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: sim}
spec:
  modelRef: {name: sim-model}
  sidecar: {inject: false}
  slo: {ttft: %[2]s}
  template:
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: agent
          image: %[1]s
          imagePullPolicy: Never
          args: ["--listen=:8000", "--max-running=%[3]d", "--prefill-rate=%[4]g", "--token-rate=%[5]g",
                 "--ttft-base=1ms", "--prefix-caching=false", "--ready-delay=%[6]s"]
          ports: [{name: http, containerPort: 8000}]
          readinessProbe:
            httpGet: {path: /readyz, port: 8000}
            periodSeconds: 1
---
`, image, slo, simSlots, simPrefill, simDecode, simReadyDelay) + simPoolYAML(slo)
}

// simPoolYAML is the pool: the adaptive policy on the replica capacity, as the bench's preset
// (the backlog target is what one replica prefills within half the SLO).
func simPoolYAML(slo time.Duration) string {
	return fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: sim}
spec:
  agentClassRef: {name: sim}
  minReplicas: 1
  maxReplicas: %d
  prewarmPercent: 0
  drainGracePeriodSeconds: 5
  autoscaling:
    metrics:
      - {type: tokens-per-second, target: "%g", averagingWindow: 10s}
      - {type: concurrent-sessions, target: "%d", averagingWindow: 10s}
      - {type: tokens-in-queue, target: "%g", averagingWindow: 10s}
    sloTarget:
      enabled: true
      adaptive: {attainmentPercent: 99}
`, simMaxReplicas, simPrefill, simSlots, simPrefill*slo.Seconds()/2)
}

// replayed is one request's outcome: when it was sent (since the replay's start), and its raw
// TTFT as the client saw it, or an error.
type replayed struct {
	sent time.Duration
	ttft time.Duration
	err  error
	// status is the HTTP status (0: none came), pod the pod that answered (the gateway's
	// X-Neuronetes-Pod), kind the failure's kind (failureKind) when err is set.
	status int
	pod    string
	kind   string
}

// replay sends every request of tr through the gateway at its arrival time (a prompt of In
// words, max_tokens Out, streamed) and returns the outcomes in trace order.
func replay(g *gwProc, tr scalesim.Trace) []replayed {
	out := make([]replayed, len(tr.Requests))
	hc := &http.Client{Timeout: 3 * time.Minute}
	start := time.Now()
	var wg sync.WaitGroup
	for i, r := range tr.Requests {
		time.Sleep(time.Until(start.Add(time.Duration(r.Arrival * float64(time.Second)))))
		wg.Go(func() {
			sent := time.Since(start)
			out[i] = sendTimed(hc, g.api, r)
			out[i].sent = sent
		})
	}
	wg.Wait()
	return out
}

// asSent is tr with each request arriving when the replay sent it, so the simulator sees the
// arrivals the pool saw (the sender runs on the same busy cores as the cluster).
func asSent(tr scalesim.Trace, results []replayed) scalesim.Trace {
	out := scalesim.Trace{Name: tr.Name, Requests: append([]scalesim.Request(nil), tr.Requests...)}
	for i := range out.Requests {
		out.Requests[i].Arrival = results[i].sent.Seconds()
	}
	sort.SliceStable(out.Requests, func(i, j int) bool { return out.Requests[i].Arrival < out.Requests[j].Arrival })
	return out
}

func sendTimed(hc *http.Client, api string, r scalesim.Request) replayed {
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "stream": true, "max_tokens": r.Out,
		"messages": []map[string]string{{"role": "user", "content": strings.TrimSpace(strings.Repeat("w ", max(r.In-2, 1)))}}})
	req, _ := http.NewRequest(http.MethodPost, "http://"+api+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+simAPIKey)
	sent := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return replayed{err: err, kind: failureKind(0, "", err)}
	}
	defer resp.Body.Close()
	out := replayed{status: resp.StatusCode, pod: resp.Header.Get("X-Neuronetes-Pod")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		code := errorCode(b)
		out.err, out.kind = fmt.Errorf("status %s: %s", resp.Status, bytes.TrimSpace(b)), failureKind(resp.StatusCode, code, nil)
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	var errEvent string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case first == 0 && strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content"`):
			first = time.Since(sent)
		case errEvent == "" && strings.HasPrefix(line, "data: {") && strings.Contains(line, `"error"`):
			errEvent = line
		}
	}
	if first == 0 {
		out.err = fmt.Errorf("no token after %s: %v %.300s", time.Since(sent).Round(time.Millisecond), sc.Err(), errEvent)
		out.kind = failureKind(resp.StatusCode, errorCode([]byte(errEvent)), nil)
		if sc.Err() != nil && errEvent == "" {
			out.kind = "stream read: " + failureKind(0, "", sc.Err())
		}
		return out
	}
	out.ttft = first
	return out
}

// TestAutoscalerMatchesSimulator replays six minutes of a trace through the gateway into demo
// agents scaled by the controller's adaptive loop, then simulates the same requests under the
// same AgentPool spec (converted by the controller's own PolicyFromAgentPool) with the measured
// cold start. The live share of requests within the SLO (raw TTFT, as the client saw it) must be
// within 5 points of the prediction, the replica-seconds of the pool's pods over the trace within
// 35%, and the most pods at once within one replica.
func TestAutoscalerMatchesSimulator(t *testing.T) {
	e := requireEnv(t)
	requireNoOtherController(t, e)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "as-sim")
	tr := simTrace(t)
	m := scalesim.Model{PrefillTPS: simPrefill, DecodeTPS: simDecode, Slots: simSlots, Step: 50 * time.Millisecond}
	slo, err := scalesim.AutoSLO(tr, m, 99.9, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	m.SLO = slo
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.Apply(t, ns, simTenantYAML)
	g := startGateway(t, e, ns, "--auth=required")
	asArgs, _, _, _ := asControllerArgs(t, e, ns, "")
	ctl := startController(t, e, ns, "neuronetes.local/no-sidecar:dev", "", asArgs...)
	e.Apply(t, ns, simManifests(agentImg, slo))
	waitPoolReady(t, e, ns, "sim", procLogs(ctl), 1, 3*time.Minute)
	Eventually(t, time.Minute, "the gateway routes to the pool", func() (bool, error) {
		r := sendTimed(&http.Client{Timeout: 30 * time.Second}, g.api, scalesim.Request{In: 10, Out: 1})
		return r.err == nil, r.err
	})
	// The pods' metric names and TTFT buckets, as the controller reads them; the gateway
	// forwards each request at once to the pod with the least prefill ahead.
	m.Sessions, m.TTFTBuckets = serverModel(t, e, ns, "sim")
	m.Routing = scalesim.RouteLeastPrefill

	ctx, cancel := context.WithCancel(context.Background())
	recDone := make(chan *poolRecorder, 1)
	go func() { recDone <- recordPool(ctx, e, ns, "sim") }()
	watchDone := make(chan *podWatch, 1)
	go func() { watchDone <- watchPods(ctx, e, ns, "sim", time.Now()) }()
	results := replay(g, tr)
	cancel()
	rec, watch := <-recDone, <-watchDone

	within, failed := 0, 0
	for _, r := range results {
		switch {
		case r.err != nil:
			failed++
		case r.ttft <= slo:
			within++
		}
	}
	live := float64(within) / float64(len(results))
	cold, n := rec.coldStart()
	if n == 0 {
		t.Fatal("no pool pod was seen starting and becoming Ready")
	}
	m.ColdStart = cold
	sent := asSent(tr, results)

	var pool nnv1.AgentPool
	var class nnv1.AgentClass
	manifests := strings.Split(simManifests(agentImg, slo), "---\n")
	if err := yaml.Unmarshal([]byte(manifests[0]), &class); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(simPoolYAML(slo)), &pool); err != nil {
		t.Fatal(err)
	}
	policy, err := scaleloop.PolicyFromAgentPool(&pool, &class, nil)
	if err != nil {
		t.Fatal(err)
	}
	simDecider := &changeLog{Decider: &scalesim.Decider{Label: "neuronetes", Every: simSync, Policy: policy}}
	sim := scalesim.Run(sent, m, simDecider, 1)
	var simPeak float64
	for _, p := range sim.Series {
		simPeak = math.Max(simPeak, p.Replicas)
	}
	// The live pods over the trace's duration, as the simulator counts its replica-seconds.
	livePods, liveSec, livePeak := perSecond(rec.podAt, rec.pods, math.Ceil(tr.Duration()))
	liveReplicas, _, _ := perSecond(rec.replicaAt, rec.replicas, math.Ceil(tr.Duration()))
	t.Logf("%s: %d requests (%d failed), sent over %.1f s, TTFT SLO %s, cold start %s (decision to Ready, median of %d pods); model %+v",
		tr.Name, len(results), failed, sent.Duration(), slo, cold, n, m)
	t.Logf("live: %.2f%% within the SLO, %.0f replica-s, at most %.0f pods; simulated: %.2f%%, %.0f replica-s, at most %.0f",
		100*live, liveSec, livePeak, 100*sim.Attainment(), sim.ReplicaSeconds, simPeak)
	t.Logf("live pods per 10 s: %v", every10(livePods))
	t.Logf("live spec.replicas per 10 s: %v", every10(liveReplicas))
	var simCurve []float64
	for _, p := range sim.Series {
		simCurve = append(simCurve, p.Replicas)
	}
	t.Logf("simulated replicas per 10 s: %v", simCurve)
	logPoolChanges(t, e, ns, "sim")
	for _, c := range simDecider.changes {
		t.Logf("simulated change: %s", c)
	}
	logFailures(t, results)
	watch.log(t)
	logGap(t, results, slo, sim, watch, rec)
	if d := math.Abs(live - sim.Attainment()); d > simAttainmentTolerance {
		t.Errorf("attainment: live %.2f%%, simulated %.2f%%: %.2f points apart, tolerance %.0f", 100*live, 100*sim.Attainment(), 100*d, 100*simAttainmentTolerance)
	}
	if r := liveSec / sim.ReplicaSeconds; math.Abs(r-1) > simCostTolerance {
		t.Errorf("replica-seconds: live %.0f, simulated %.0f (%.2fx), tolerance %.0f%%", liveSec, sim.ReplicaSeconds, r, 100*simCostTolerance)
	}
	if math.Abs(livePeak-simPeak) > simPeakTolerance {
		t.Errorf("peak replicas: live %.0f, simulated %.0f, tolerance %d", livePeak, simPeak, simPeakTolerance)
	}
}

// changeLog records the simulated decisions that changed the replica count.
type changeLog struct {
	*scalesim.Decider
	changes []string
}

// Decide implements scalesim.Policy.
func (c *changeLog) Decide(v scalesim.View) int {
	n := c.Decider.Decide(v)
	if d := c.Last(); d.Changed() {
		c.changes = append(c.changes, fmt.Sprintf("t=%.0fs %s", v.Now(), d.Message))
	}
	return n
}

// logPoolChanges logs the pool's ScaledUp and ScaledDown Events (the live decisions).
func logPoolChanges(t *testing.T, e *Env, ns, pool string) {
	evs, err := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("events: %v", err)
		return
	}
	sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Kind == "AgentPool" && ev.InvolvedObject.Name == pool && (ev.Reason == "ScaledUp" || ev.Reason == "ScaledDown") {
			t.Logf("live change %s: %s", ev.LastTimestamp.Format(time.TimeOnly), ev.Message)
		}
	}
}

// every10 keeps one sample in ten.
func every10(v []float64) []float64 {
	var out []float64
	for i := 0; i < len(v); i += 10 {
		out = append(out, v[i])
	}
	return out
}

// requireNoOtherController fails the test when a NeuroNetes controller is deployed in the cluster
// (make run / make deploy-local leave the release installed): it reconciles and autoscales
// AgentPools in every namespace, so the test's pool would have two autoscalers and two pod
// reconcilers, and the live curve would be theirs, not the loop's under test.
func requireNoOtherController(t *testing.T, e *Env) {
	t.Helper()
	if err := noReleaseInstalled(context.Background(), e); err != nil {
		t.Fatalf("%v; uninstall it first (bash hack/deploy-local.sh --uninstall)", err)
	}
}
