package e2e

// What TestAutoscalerMatchesSimulator measures on the cluster to build the simulator's model: the
// pool's replica curve and cold start, and the metric names and TTFT buckets its pods export.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scaleloop"
	"github.com/neuronetes/neuronetes/controller/scalesim"
)

// poolRecorder samples, about every second, spec.replicas and the pool's pods that exist
// (starting, serving or terminating: what costs, as the simulator counts replicas). Each sample
// carries its wall-clock time: under load a GET or LIST can take more than a second, so sample
// indexes are not seconds. Pods are keyed by UID, since a pool reuses its pods' names (slot
// indexes) when it scales down and up again.
type poolRecorder struct {
	start time.Time
	// replicas and pods are the samples, at times replicaAt and podAt (seconds since start).
	replicas, pods     []float64
	replicaAt, podAt   []float64
	increases          []float64             // times of the samples that showed spec.replicas rise
	firstSeen, readyAt map[types.UID]float64 // first sample showing the pod, and showing it Ready
	createdAfterStart  map[types.UID]bool
}

func recordPool(ctx context.Context, e *Env, ns, pool string) *poolRecorder {
	rec := &poolRecorder{start: time.Now(), firstSeen: map[types.UID]float64{}, readyAt: map[types.UID]float64{},
		createdAfterStart: map[types.UID]bool{}}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		u, err := e.Dynamic.Resource(ctrlPoolGVR).Namespace(ns).Get(ctx, pool, metav1.GetOptions{})
		if err == nil {
			spec, _ := u.Object["spec"].(map[string]any)
			n, _ := spec["replicas"].(int64)
			rec.addReplicas(time.Since(rec.start).Seconds(), float64(n))
		}
		pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=" + pool})
		if err == nil {
			rec.addPods(time.Since(rec.start).Seconds(), pods.Items)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return rec
}

func (r *poolRecorder) addReplicas(at, n float64) {
	if k := len(r.replicas); k > 0 && n > r.replicas[k-1] {
		r.increases = append(r.increases, at)
	}
	r.replicas, r.replicaAt = append(r.replicas, n), append(r.replicaAt, at)
}

func (r *poolRecorder) addPods(at float64, pods []corev1.Pod) {
	r.pods, r.podAt = append(r.pods, float64(len(pods))), append(r.podAt, at)
	for i := range pods {
		p := &pods[i]
		if _, ok := r.firstSeen[p.UID]; !ok {
			r.firstSeen[p.UID] = at
			// creationTimestamp has whole seconds: a pod created in the recording's first
			// second may read as created before it.
			r.createdAfterStart[p.UID] = !p.CreationTimestamp.Time.Before(r.start.Truncate(time.Second))
		}
		if _, ok := r.readyAt[p.UID]; !ok && podIsReady(p) {
			r.readyAt[p.UID] = at
		}
	}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// coldStart is the median time from the autoscaler's decision to a pod's readiness, as the
// simulator's ColdStart counts it (decision, pod creation, scheduling, container start, load,
// readiness probe): for each pod created during the recording that became Ready, from the
// sample that showed the spec.replicas rise it answers (the latest rise seen at or before the
// sample that first showed the pod) to the first sample that showed it Ready. Both ends are
// sampled by the same loop, so its sampling delays cancel on average.
func (r *poolRecorder) coldStart() (time.Duration, int) {
	var ds []float64
	for uid, ready := range r.readyAt {
		if !r.createdAfterStart[uid] {
			continue
		}
		first := r.firstSeen[uid]
		j := sort.SearchFloat64s(r.increases, first+1e-9) - 1 // the latest rise at or before the pod
		if j < 0 {
			continue
		}
		ds = append(ds, ready-r.increases[j])
	}
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Float64s(ds)
	return time.Duration(ds[len(ds)/2] * float64(time.Second)).Round(time.Millisecond), len(ds)
}

// perSecond reads samples v taken at times at (seconds, increasing) as a step function once a
// second over [0, d): at each second, the latest sample at or before it (the first before any).
// It also returns the integral (replica-seconds, for pod counts) and the maximum.
func perSecond(at, v []float64, d float64) (out []float64, integral, peak float64) {
	j := -1
	for s := 0; float64(s) < d && len(v) > 0; s++ {
		for j+1 < len(at) && at[j+1] <= float64(s) {
			j++
		}
		x := v[max(j, 0)]
		out = append(out, x)
		integral += x
		peak = math.Max(peak, x)
	}
	return out, integral, peak
}

// serverModel reads, from a ready pod of the pool, what decides how the controller sees the
// pods: which name its concurrent-sessions come from (scalesim.Sessions) and the bucket bounds of
// the TTFT histogram the adaptive policy counts first tokens in.
func serverModel(t *testing.T, e *Env, ns, pool string) (scalesim.Sessions, []float64) {
	t.Helper()
	pods, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !podIsReady(&p) || p.Status.PodIP == "" {
			continue
		}
		sess, bounds, err := scrapeServerModel(fmt.Sprintf("http://%s:8000/metrics", p.Status.PodIP))
		if err != nil {
			t.Fatal(err)
		}
		return sess, bounds
	}
	t.Fatalf("no ready pod in pool %s to read the metric names from", pool)
	return 0, nil
}

func scrapeServerModel(url string) (scalesim.Sessions, []float64, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", url, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", url, err)
	}
	sess := scalesim.SessionsRunning
	if _, ok := fams["neuronetes_concurrent_sessions"]; ok {
		sess = scalesim.SessionsConversations
	}
	s, err := scaleloop.ParseMetrics(bytes.NewReader(body), time.Now())
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", url, err)
	}
	if s.TTFT == nil {
		return 0, nil, fmt.Errorf("%s: no TTFT histogram (has the pod served a request?)", url)
	}
	var bounds []float64
	for _, b := range s.TTFT.Bounds {
		if !math.IsInf(b, 1) {
			bounds = append(bounds, b)
		}
	}
	return sess, bounds, nil
}
