package e2e

// The session claim benchmark (issue "agent sessions", target Claim): AgentSessions created one
// after another against a warm pool, create to Running, beside sessions of the same class
// without a pool in the same run. hack/bench.d/46-session-claim.sh runs it; make e2e skips it.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/cluster"
)

// runningWatch records, from one watch of a namespace's AgentSessions, when each was first seen
// Running and the pod it runs in.
type runningWatch struct {
	mu   sync.Mutex
	at   map[string]time.Time
	pod  map[string]string
	seen chan string
}

func watchRunning(ctx context.Context, t *testing.T, c client.WithWatch, ns string) *runningWatch {
	t.Helper()
	w, err := c.Watch(ctx, &v1alpha1.AgentSessionList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	rw := &runningWatch{at: map[string]time.Time{}, pod: map[string]string{}, seen: make(chan string, 1024)}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*v1alpha1.AgentSession)
			if !ok || ev.Type == watch.Deleted || s.Status.Phase != v1alpha1.SessionRunning {
				continue
			}
			now := time.Now()
			rw.mu.Lock()
			if _, done := rw.at[s.Name]; !done {
				rw.at[s.Name], rw.pod[s.Name] = now, s.Status.PodName
				rw.seen <- s.Name
			}
			rw.mu.Unlock()
		}
	}()
	return rw
}

// watchClaimed records when each pod of ns was first seen labelled neuronetes.io/session=<s>
// (for a warm pod: claimed), by session.
func watchClaimed(ctx context.Context, t *testing.T, c client.WithWatch, ns string) func(string) (time.Time, bool) {
	t.Helper()
	w, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	at := map[string]time.Time{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Labels[v1alpha1.SessionLabel] == "" {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, done := at[p.Labels[v1alpha1.SessionLabel]]; !done {
				at[p.Labels[v1alpha1.SessionLabel]] = now
			}
			mu.Unlock()
		}
	}()
	return func(s string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		t, ok := at[s]
		return t, ok
	}
}

// wait returns when session name was seen Running, and its pod.
func (rw *runningWatch) wait(t *testing.T, name string, timeout time.Duration) (time.Time, string) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		rw.mu.Lock()
		at, ok := rw.at[name]
		pod := rw.pod[name]
		rw.mu.Unlock()
		if ok {
			return at, pod
		}
		select {
		case <-rw.seen:
		case <-deadline:
			t.Fatalf("session %s not Running within %v", name, timeout)
		}
	}
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// TestAgentSessionBenchClaim creates NEURONETES_BENCH_CLAIM_SESSIONS (default 30) AgentSessions
// one after another of a class with a warm pool of NEURONETES_BENCH_CLAIM_POOL (default 3) pause
// pods, waiting before each until the pool is Ready again, and NEURONETES_BENCH_CLAIM_COLD
// (default 10) of the same class without a pool; each from the client's create to the watch
// seeing it Running. Every pool session must run in a claimed warm pod. It prints p50 and p99 of
// both and a result line for the bench script.
func TestAgentSessionBenchClaim(t *testing.T) {
	if os.Getenv("NEURONETES_BENCH") != "1" {
		t.Skip("benchmark; set NEURONETES_BENCH=1 (hack/bench.d/46-session-claim.sh does)")
	}
	n := benchEnvInt(t, "NEURONETES_BENCH_CLAIM_SESSIONS", 30)
	size := benchEnvInt(t, "NEURONETES_BENCH_CLAIM_POOL", 3)
	coldN := benchEnvInt(t, "NEURONETES_BENCH_CLAIM_COLD", 10)
	e := requireEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ctrlInstallCRDs(t, e)
	for _, crd := range []string{"agentcheckpoints", "agentsessions", "agentclasses"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	ns := e.Namespace(t, "sess-claim-bench")
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: ctrlScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	startSessionController(ctx, t, e, warmSessionPolicy())
	for _, cl := range []*v1alpha1.AgentClass{
		warmClass(ns, "warm", cluster.PauseImage, e.NodeName, int32(size)),
		warmClass(ns, "cold", cluster.PauseImage, e.NodeName, 0),
	} {
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	rw := watchRunning(ctx, t, c, ns)
	claimedAt := watchClaimed(ctx, t, c, ns)
	poolReady := func() {
		Eventually(t, 2*time.Minute, fmt.Sprintf("%d Ready warm pods", size), func() (bool, error) {
			ready, err := readyWarmPods(ctx, c, ns, "warm")
			return len(ready) >= size, err
		})
	}
	var toClaim, claimToRunning []time.Duration
	run := func(class, name string) (time.Duration, string) {
		s := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: class}}}
		start := time.Now()
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		at, pod := rw.wait(t, name, 2*time.Minute)
		if cl, ok := claimedAt(name); ok && class == "warm" {
			toClaim, claimToRunning = append(toClaim, cl.Sub(start)), append(claimToRunning, at.Sub(cl))
		}
		// Let it go (its pod's grace is 1 s) so the node does not fill up.
		_ = c.Delete(ctx, s)
		return at.Sub(start), pod
	}
	// The baseline first: a fresh pod per session, created to Running (pod Ready).
	var colds, claims []time.Duration
	for i := range coldN {
		d, _ := run("cold", fmt.Sprintf("cold-%d", i))
		colds = append(colds, d)
	}
	claimed := 0
	// The API server's own write latency in the same run: one ConfigMap update after each claim
	// (a claim is three writes in a row: the session's NetworkPolicy, the pod, the session's
	// status).
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "write-probe"}, Data: map[string]string{"n": "0"}}
	if err := c.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	var writes []time.Duration
	for i := range n {
		poolReady()
		d, pod := run("warm", fmt.Sprintf("warm-%d", i))
		claims = append(claims, d)
		probe.Data["n"] = fmt.Sprint(i + 1)
		w0 := time.Now()
		if err := c.Update(ctx, probe); err != nil {
			t.Fatal(err)
		}
		writes = append(writes, time.Since(w0))
		if pod != fmt.Sprintf("warm-%d-1", i) {
			claimed++
		}
		stage := ""
		if j := len(toClaim) - 1; j >= 0 && len(toClaim) == len(claims) {
			stage = fmt.Sprintf(" (to pod claimed %v, then to Running %v)", toClaim[j].Round(time.Millisecond/10), claimToRunning[j].Round(time.Millisecond/10))
		}
		t.Logf("session warm-%d: %v in pod %s%s", i, d.Round(time.Millisecond), pod, stage)
	}
	if len(toClaim) > 0 {
		// Where a claim's time goes: create to the pod seen relabelled (the session's event
		// reaching the controller, its reads, the session NetworkPolicy, the pod update), then
		// to Running (the status patch, the watch).
		t.Logf("claim stages: create to pod claimed p50 %v p99 %v; pod claimed to Running p50 %v p99 %v",
			percentile(toClaim, 50).Round(time.Millisecond/10), percentile(toClaim, 99).Round(time.Millisecond/10),
			percentile(claimToRunning, 50).Round(time.Millisecond/10), percentile(claimToRunning, 99).Round(time.Millisecond/10))
	}
	t.Logf("API server writes (a ConfigMap update after each claim): p50 %v p99 %v",
		percentile(writes, 50).Round(time.Millisecond/10), percentile(writes, 99).Round(time.Millisecond/10))
	t.Logf("cold (no pool): %v", colds)
	t.Logf("claims: %v", claims)
	fmt.Printf("session claim result: claim_p50_ms=%.1f claim_p99_ms=%.1f cold_p50_ms=%.1f cold_p99_ms=%.1f claimed=%d sessions=%d cold_sessions=%d pool=%d\n",
		ms(percentile(claims, 50)), ms(percentile(claims, 99)), ms(percentile(colds, 50)), ms(percentile(colds, 99)), claimed, n, coldN, size)
	if claimed != n {
		t.Errorf("%d of %d sessions claimed a warm pod", claimed, n)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
