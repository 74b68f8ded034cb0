package e2e

// The session resume benchmark (issue "agent sessions", target Resume): a session whose process
// holds 1 GiB of state, resumed through the gateway, against a cold start of the same agent class
// in the same run. hack/bench.d/47-session-resume.sh runs it; make e2e skips it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/controller/agentsession"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// benchStateBytes is the session process's state: 1 GiB, as the target says.
const benchStateBytes = 1 << 30

// TestAgentSessionBenchResume measures, per round: a cold start (a new AgentSession of the
// demo agent class with --state-bytes=1GiB; from its creation to the first token of a turn sent
// through the gateway's session route, which holds the turn until the pod runs; the agent
// allocates and fills its state before it answers) and a resume (the test writes new state into
// the running process, POST /state, the idle timeout suspends the session, and the next turn
// through the gateway is held while it resumes; from sending to the first token). The resumed
// process's state must hash to what was written. It prints each stage's time (stamps from
// watches and from the node agent's engine) and a result line for the bench script.
func TestAgentSessionBenchResume(t *testing.T) {
	if os.Getenv("NEURONETES_BENCH") != "1" {
		t.Skip("benchmark; set NEURONETES_BENCH=1 (hack/bench.d/47-session-resume.sh does)")
	}
	rounds := benchEnvInt(t, "NEURONETES_BENCH_ROUNDS", 3)
	b := newSessionBench(t, time.Duration(rounds)*3*time.Minute+5*time.Minute, benchStateBytes, 12*time.Second)
	var colds, resumes []time.Duration
	var phases [][]phase
	for i := range rounds {
		name := fmt.Sprintf("b%d", i)
		cold, resume, ps := benchRound(b.ctx, t, b, name, i == 0)
		colds, resumes, phases = append(colds, cold), append(resumes, resume), append(phases, ps)
	}
	mc, mr := median(colds), median(resumes)
	t.Logf("cold starts %v, median %v", colds, mc)
	t.Logf("resumes %v, median %v", resumes, mr)
	fl := measureFloors(t, b.storeDir, benchStateBytes)
	reportBreakdown(mc, mr, phases, fl, b.lazy, b.cache, b.warmHosts)
	fmt.Printf("session bench result: cold_ms=%d resume_ms=%d rounds=%d lazy=%v local_cache=%v warm_hosts=%v\n", mc.Milliseconds(), mr.Milliseconds(), rounds, b.lazy, b.cache, b.warmHosts)
}

// benchEnvInt reads a positive integer from env, or def.
func benchEnvInt(t *testing.T, env string, def int) int {
	t.Helper()
	n := def
	if v := os.Getenv(env); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			t.Fatalf("%s=%q", env, v)
		}
	}
	return n
}

// sessionBench is a session benchmark's setup: a namespace with the demo agent class (state
// bytes, idle timeout), the gateway, and the session controller and node agent in-process.
type sessionBench struct {
	ctx      context.Context
	c        client.WithWatch
	g        *gwProc
	engine   *container.Engine
	ns       string
	stamps   *stamps
	storeDir string
	idle     time.Duration
	// lazy: the node agent restores with CRIU lazy pages (NEURONETES_BENCH_LAZY, default on);
	// cache: it keeps its dumps in a local cache on the store's disk (NEURONETES_BENCH_LOCAL_CACHE).
	lazy, cache bool
	// warmHosts: the class keeps a warm restore host, which each resume must claim.
	warmHosts bool
}

// newSessionBench sets a session benchmark up; everything ends with the test.
func newSessionBench(t *testing.T, timeout time.Duration, stateBytes int64, idle time.Duration) *sessionBench {
	e := requireEnv(t)
	sock := requireContainerCRIU(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	ctrlInstallCRDs(t, e)
	for _, crd := range []string{"agentcheckpoints", "agentsessions", "agentclasses", "tenants"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	ns := e.NamespaceWithPodSecurity(t, "sess-bench", "baseline", "CRIU on the development VM needs the checkpointed agent to run as root (docs/checkpoint.md)")
	applyAPIKeyTenant(t, e, ns, gatewayAPIKey)
	g := startGateway(t, e, ns, "--agent-sessions", "--session-resume-timeout=2m")

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	class := sessionClass(ns, img, e.NodeName)
	class.Spec.Template.Spec.Containers[0].Args = append(class.Spec.Template.Spec.Containers[0].Args, fmt.Sprintf("--state-bytes=%d", stateBytes))
	// A resume claims a running warm restore host of the class (NEURONETES_BENCH_WARM_HOSTS,
	// default on; 0: every resume creates its host pod).
	warmHosts := os.Getenv("NEURONETES_BENCH_WARM_HOSTS") != "0"
	if warmHosts {
		class.Spec.Sessions = &v1alpha1.SessionsConfig{WarmRestoreHosts: 1}
	}
	if err := c.Create(ctx, class); err != nil {
		t.Fatal(err)
	}

	// The node agent's AgentCheckpoint handling (staging in /dev/shm, its default) with a timed
	// engine, and the session controller, in-process.
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(scheme))
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("/dev/shm", "nn-sbench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	storeDir := t.TempDir()
	lazy := os.Getenv("NEURONETES_BENCH_LAZY") != "0"
	cacheDir := "" // the node's own dumps kept on its disk (the store's), read in place on resume
	if os.Getenv("NEURONETES_BENCH_LOCAL_CACHE") != "0" {
		cacheDir = filepath.Join(t.TempDir(), "local-cache")
	}
	engine, err := snapshot.NewEngine(ctx, snapshot.Config{ContainerdSocket: sock, StoreDir: storeDir, WorkDir: work, SigningKeyFile: writeSigningKey(t),
		LazyRestore: lazy, LocalCacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	st := newStamps()
	if err := snapshot.Setup(mgr, snapshot.Options{NodeName: e.NodeName, Engine: &timedEngine{Engine: engine, s: st}}); err != nil {
		t.Fatal(err)
	}
	if err := (&agentsession.Reconciler{RestoreHostImage: cluster.PauseImage}).SetupWithManager(mgr, ""); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	t.Cleanup(mcancel)
	go func() { _ = mgr.Start(mctx) }()
	watchStamps(mctx, t, c, ns, st)
	return &sessionBench{ctx: ctx, c: c, g: g, engine: engine.C, ns: ns, stamps: st, storeDir: storeDir, idle: idle, lazy: lazy, cache: cacheDir != "", warmHosts: warmHosts}
}

// benchRound runs one cold start and one resume of session name and returns both times and the
// resume's phases. With resuspend, the resumed session is then suspended again, and the
// container restored into its host pod must be gone from containerd (the node agent removes it).
func benchRound(ctx context.Context, t *testing.T, b *sessionBench, name string, resuspend bool) (cold, resume time.Duration, ps []phase) {
	t.Helper()
	c, g, eng, ns, st := b.c, b.g, b.engine, b.ns, b.stamps
	s := benchSession(ns, name, 12*time.Second)
	t0 := time.Now()
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// The gateway answers 404 until its informer has the session: retry those.
	var r sessionReply
	for {
		sent := time.Now()
		r = g.sessionChat(t, gatewayAPIKey, name, "cold turn")
		// A 502 backend_unreachable: the class has no readiness probe, so the pod can be Ready
		// before the agent listens; the client's retry counts in the cold start.
		retry := r.status == http.StatusNotFound || r.status == http.StatusBadGateway && strings.Contains(string(r.body), "backend_unreachable")
		if !retry || time.Since(t0) > time.Minute {
			cold = sent.Sub(t0) + r.ttft
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	first := name + "-1"
	if r.status != http.StatusOK || r.content == "" || r.header.Get("X-Neuronetes-Pod") != first {
		t.Fatalf("cold turn of %s: %d from %q: %s", name, r.status, r.header.Get("X-Neuronetes-Pod"), r.body)
	}
	st.report(t, name+" cold start", t0, t0.Add(cold))

	// The state the test writes, and the idle timeout's suspension.
	var p corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: first}, &p); err != nil {
		t.Fatal(err)
	}
	written := agentState(t, http.MethodPost, p.Status.PodIP, fmt.Sprintf("?seed=%d", 1000+len(name)+int(t0.UnixNano()%1000)))
	Eventually(t, 2*time.Minute, "session "+name+" Suspended", func() (bool, error) {
		var cur v1alpha1.AgentSession
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cur)
		return err == nil && cur.Status.Phase == v1alpha1.SessionSuspended, fmt.Errorf("phase %q (%v)", cur.Status.Phase, err)
	})
	Eventually(t, time.Minute, "pod "+first+" deleted", func() (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: first}, &corev1.Pod{})
		return err != nil && strings.Contains(err.Error(), "not found"), err
	})
	if b.warmHosts {
		Eventually(t, 2*time.Minute, "a running warm restore host", func() (bool, error) {
			var l corev1.PodList
			err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.WarmRestoreHostLabel: "true"})
			for _, h := range l.Items {
				for _, cs := range h.Status.ContainerStatuses {
					if cs.State.Running != nil {
						return true, nil
					}
				}
			}
			return false, fmt.Errorf("%d hosts, none running (%v)", len(l.Items), err)
		})
	}
	t1 := time.Now()
	st.report(t, name+" state written and suspended", t0.Add(cold), t1)
	r = g.sessionChat(t, gatewayAPIKey, name, "resumed turn")
	var cur v1alpha1.AgentSession
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cur); err != nil {
		t.Fatal(err)
	}
	second := cur.Status.PodName
	if r.status != http.StatusOK || r.content == "" || second == first || r.header.Get("X-Neuronetes-Pod") != second {
		t.Fatalf("resumed turn of %s: %d from %q (session's pod %q): %s", name, r.status, r.header.Get("X-Neuronetes-Pod"), second, r.body)
	}
	if b.warmHosts {
		checkWarmHostClaimed(ctx, t, c, &cur)
	} else if second != name+"-2" {
		t.Fatalf("resumed into %s, want %s-2 (no warm restore hosts)", second, name)
	}
	resume = r.ttft
	st.report(t, name+" resume", t1, t1.Add(resume))
	ps = st.measure(resumePhases(name, second), t1, t1.Add(resume))
	printPhases(name, ps, resume)
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: second}, &p); err != nil {
		t.Fatal(err)
	}
	got := agentState(t, http.MethodGet, p.Status.PodIP, "")
	if got != written || got.Bytes != benchStateBytes {
		t.Fatalf("state after resume %+v, want %+v as written before the suspension", got, written)
	}
	t.Logf("%s: state intact: %d bytes, sha256 %s (written with seed %d before suspending)", name, got.Bytes, got.SHA256, got.Seed)

	if resuspend {
		suspendAgainLeavesNoRestored(ctx, t, c, eng, ns, name, p.Status.ContainerStatuses[0].ContainerID)
	}
	// Free the round's memory: the restored process, then the session (its pods).
	removeRestored(t, eng, p.Status.ContainerStatuses[0].ContainerID)
	if err := c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 2*time.Minute, "pods of "+name+" gone", func() (bool, error) {
		var pods corev1.PodList
		err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"neuronetes.io/session": name})
		return err == nil && len(pods.Items) == 0, fmt.Errorf("%d pods (%v)", len(pods.Items), err)
	})
	return cold, resume, ps
}

// benchSession is an AgentSession of the benchmark's class with an idle timeout.
func benchSession(ns, name string, idle time.Duration) *v1alpha1.AgentSession {
	return &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "demo"}, IdleTimeout: &metav1.Duration{Duration: idle}}}
}

// agentState calls the demo agent's /state (docs/demo-agent.md) on the pod at ip.
func agentState(t *testing.T, method, ip, query string) stateReply {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+ip+":8000/state"+query, nil)
	req.Close = true // no connection left open for CRIU to refuse
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s /state of %s: %v", method, ip, err)
	}
	defer resp.Body.Close()
	var s stateReply
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&s) != nil {
		t.Fatalf("%s /state of %s: %d", method, ip, resp.StatusCode)
	}
	return s
}

// stateReply is the demo agent's /state answer.
type stateReply struct {
	Bytes  int    `json:"bytes"`
	Seed   uint64 `json:"seed"`
	SHA256 string `json:"sha256"`
}

// median of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// suspendAgainLeavesNoRestored suspends the resumed session name by request and checks that no
// container restored into its host container (CRI id hostCRIID) is left in containerd: the node
// agent removes a restored container once its checkpoint is stored.
func suspendAgainLeavesNoRestored(ctx context.Context, t *testing.T, c client.Client, eng *container.Engine, ns, name, hostCRIID string) {
	t.Helper()
	var s v1alpha1.AgentSession
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.Suspend = true
	if err := c.Patch(ctx, &s, patch); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 2*time.Minute, "resumed session "+name+" Suspended again", func() (bool, error) {
		var cur v1alpha1.AgentSession
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cur)
		return err == nil && cur.Status.Phase == v1alpha1.SessionSuspended && cur.Status.Pods == 2, fmt.Errorf("phase %q pods %d (%v)", cur.Status.Phase, cur.Status.Pods, err)
	})
	_, hostID, _ := strings.Cut(hostCRIID, "://")
	cs, err := eng.Client.Containers(namespaces.WithNamespace(ctx, container.Namespace), fmt.Sprintf("labels.%q==%s", container.LabelHost, hostID))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		var ids []string
		for _, x := range cs {
			ids = append(ids, x.ID())
		}
		t.Fatalf("after the resumed session %s was suspended again, containers restored into its host are left in containerd: %v", name, ids)
	}
	t.Logf("%s: suspended again; no restored container left in containerd", name)
}
