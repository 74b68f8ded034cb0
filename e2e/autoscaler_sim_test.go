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
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scaleloop"
	"github.com/neuronetes/neuronetes/controller/scalesim"
)

// The replica model the demo agents run, in the simulator's terms: one prefill at a time at
// simPrefill words/s, simSlots sequences, simDecode tokens/s each, and a load time before
// readiness; the controller decides every 3 s (asControllerArgs).
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

// simTrace is the first 12 minutes of the synthetic ramp trace (seed 1), compressed 2x in time
// (6 req/s rising to 24 req/s over 6 minutes), with prompts halved and outputs a fifth (at least 1
// token) so that the machine's two cores carry the stream.
func simTrace(t *testing.T) scalesim.Trace {
	tr, err := scalesim.Synthetic("ramp", 1, 12*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr.Requests {
		r := &tr.Requests[i]
		r.Arrival /= 2
		r.In, r.Out = max(r.In/2, 1), max(r.Out/5, 1)
	}
	tr.Name = "ramp-1-compressed"
	return tr
}

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
apiVersion: neuronetes.io/v1alpha1
kind: RoutingPolicy
metadata: {name: sim}
spec:
  targetRef: {kind: AgentPool, name: sim}
  admission: {maxInFlightPerEndpoint: %[3]d, maxQueue: 100000, queueTimeout: 120s}
---
`, image, slo, simSlots, simPrefill, simDecode, simReadyDelay) + simPoolYAML
}

// simPoolYAML is the pool: the adaptive policy on the replica capacity, as the bench's preset.
var simPoolYAML = fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
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
    sloTarget:
      enabled: true
      adaptive: {attainmentPercent: 99}
`, simMaxReplicas, simPrefill, simSlots)

// replayed is one request's outcome: its raw TTFT as the client saw it, or an error.
type replayed struct {
	ttft time.Duration
	err  error
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
		wg.Go(func() { out[i] = sendTimed(hc, g.api, r) })
	}
	wg.Wait()
	return out
}

func sendTimed(hc *http.Client, api string, r scalesim.Request) replayed {
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "stream": true, "max_tokens": r.Out,
		"messages": []map[string]string{{"role": "user", "content": strings.TrimSpace(strings.Repeat("w ", max(r.In-2, 1)))}}})
	sent := time.Now()
	resp, err := hc.Post("http://"+api+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return replayed{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return replayed{err: fmt.Errorf("status %s", resp.Status)}
	}
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	for sc.Scan() {
		if line := sc.Text(); first == 0 && strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content"`) {
			first = time.Since(sent)
		}
	}
	if first == 0 {
		return replayed{err: fmt.Errorf("no token: %v", sc.Err())}
	}
	return replayed{ttft: first}
}

// poolRecorder samples, every second, spec.replicas and the pool's pods that exist (starting,
// serving or terminating: what costs, as the simulator counts replicas), and notes when each pod
// was created and became Ready.
type poolRecorder struct {
	replicas, pods []float64
	created, ready map[string]time.Time
}

func recordPool(ctx context.Context, e *Env, ns, pool string) *poolRecorder {
	rec := &poolRecorder{created: map[string]time.Time{}, ready: map[string]time.Time{}}
	for tick := time.NewTicker(time.Second); ctx.Err() == nil; <-tick.C {
		u, err := e.Dynamic.Resource(ctrlPoolGVR).Namespace(ns).Get(ctx, pool, metav1.GetOptions{})
		if err == nil {
			spec, _ := u.Object["spec"].(map[string]any)
			n, _ := spec["replicas"].(int64)
			rec.replicas = append(rec.replicas, float64(n))
		}
		pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=" + pool})
		if err != nil {
			continue
		}
		rec.pods = append(rec.pods, float64(len(pods.Items)))
		for _, p := range pods.Items {
			rec.created[p.Name] = p.CreationTimestamp.Time
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					if _, seen := rec.ready[p.Name]; !seen {
						rec.ready[p.Name] = c.LastTransitionTime.Time
					}
				}
			}
		}
	}
	return rec
}

// coldStart is the median time from a pod's creation to its Ready condition.
func (r *poolRecorder) coldStart() (time.Duration, int) {
	var ds []time.Duration
	for name, rd := range r.ready {
		if c, ok := r.created[name]; ok && rd.After(c) {
			ds = append(ds, rd.Sub(c))
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], len(ds)
}

// TestAutoscalerMatchesSimulator replays six minutes of a trace through the gateway into demo
// agents scaled by the controller's adaptive loop, then simulates the same requests under the
// same AgentPool spec (converted by the controller's own PolicyFromAgentPool) with the measured
// cold start. The live share of requests within the SLO (raw TTFT, as the client saw it) must be
// within 5 points of the prediction, the replica-seconds of the pool's pods over the trace within
// 35%, and the most pods at once within one replica.
func TestAutoscalerMatchesSimulator(t *testing.T) {
	e := requireEnv(t)
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
	g := startGateway(t, e, ns)
	asArgs, _, _, _ := asControllerArgs(t, e, ns, "")
	ctl := startController(t, e, ns, "neuronetes.local/no-sidecar:dev", "", asArgs...)
	e.Apply(t, ns, simManifests(agentImg, slo))
	waitPoolReady(t, e, ns, "sim", procLogs(ctl), 1, 3*time.Minute)
	Eventually(t, time.Minute, "the gateway routes to the pool", func() (bool, error) {
		r := sendTimed(&http.Client{Timeout: 30 * time.Second}, g.api, scalesim.Request{In: 10, Out: 1})
		return r.err == nil, r.err
	})

	ctx, cancel := context.WithCancel(context.Background())
	recDone := make(chan *poolRecorder, 1)
	go func() { recDone <- recordPool(ctx, e, ns, "sim") }()
	results := replay(g, tr)
	cancel()
	rec := <-recDone

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
		t.Fatal("no pool pod was seen becoming Ready")
	}
	m.ColdStart = cold

	var pool nnv1.AgentPool
	var class nnv1.AgentClass
	manifests := strings.Split(simManifests(agentImg, slo), "---\n")
	if err := yaml.Unmarshal([]byte(manifests[0]), &class); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(simPoolYAML), &pool); err != nil {
		t.Fatal(err)
	}
	policy, err := scaleloop.PolicyFromAgentPool(&pool, &class, nil)
	if err != nil {
		t.Fatal(err)
	}
	sim := scalesim.Run(tr, m, &scalesim.Decider{Label: "neuronetes", Every: simSync, Policy: policy}, 1)
	var simPeak float64
	for _, p := range sim.Series {
		simPeak = math.Max(simPeak, p.Replicas)
	}
	// The live pods over the trace's duration, as the simulator counts its replica-seconds.
	livePods := rec.pods[:min(len(rec.pods), int(math.Ceil(tr.Duration())))]
	var liveSec, livePeak float64
	for _, r := range livePods {
		liveSec += r
		livePeak = math.Max(livePeak, r)
	}
	t.Logf("%s: %d requests (%d failed), TTFT SLO %s, cold start %s (median of %d pods)", tr.Name, len(results), failed, slo, cold.Round(10*time.Millisecond), n)
	t.Logf("live: %.2f%% within the SLO, %.0f replica-s, at most %.0f pods; simulated: %.2f%%, %.0f replica-s, at most %.0f",
		100*live, liveSec, livePeak, 100*sim.Attainment(), sim.ReplicaSeconds, simPeak)
	t.Logf("live pods per 10 s: %v", every10(livePods))
	t.Logf("live spec.replicas per 10 s: %v", every10(rec.replicas))
	var simCurve []float64
	for _, p := range sim.Series {
		simCurve = append(simCurve, p.Replicas)
	}
	t.Logf("simulated replicas per 10 s: %v", simCurve)
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

// every10 keeps one sample in ten.
func every10(v []float64) []float64 {
	var out []float64
	for i := 0; i < len(v); i += 10 {
		out = append(out, v[i])
	}
	return out
}
