package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/scale"
	"github.com/neuronetes/neuronetes/internal/seeddocs"
)

var ctrlPoolGVR = schema.GroupVersionResource{Group: "neuronetes.io", Version: "v1alpha1", Resource: "agentpools"}

// ctrlInstallCRDs server-side applies deploy/crds (kept after the test: other components share
// them) and waits until the API serves them.
func ctrlInstallCRDs(t *testing.T, e *Env) {
	t.Helper()
	e.Kubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=neuronetes-controller-e2e", "-f", filepath.Join(e.Root, "deploy", "crds"))
	for _, crd := range []string{"models", "agentclasses", "agentpools", "toolbindings"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+crd+".neuronetes.io")
	}
	Eventually(t, 30*time.Second, "agentpools served", func() (bool, error) {
		_, err := e.Dynamic.Resource(ctrlPoolGVR).Namespace("default").List(context.Background(), metav1.ListOptions{Limit: 1})
		return err == nil, err
	})
}

// kwokRun returns a new scale-run ID for a test's kwok nodes, ResourceSlices and DeviceClasses
// (scale.CreateNodes, PublishSlices, EnsureDeviceClasses label them with it); everything of the
// run is deleted at the test's cleanup.
func kwokRun(t *testing.T, e *Env) string {
	t.Helper()
	runID := fmt.Sprintf("%s%d", scale.TestRunPrefix, time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := scale.Cleanup(ctx, e.Kube, runID); err != nil {
			t.Errorf("cleanup of kwok run %s: %v", runID, err)
		}
	})
	return runID
}

// TestControllerSeedExamplesAccepted creates every seed 001 example (verbatim fixtures) on the
// real apiserver.
func TestControllerSeedExamplesAccepted(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-seed")
	files, err := filepath.Glob(filepath.Join(e.Root, "api/v1alpha1/testdata/seed001/*.yaml"))
	if err != nil || len(files) < 20 {
		t.Fatalf("seed fixtures: %d, %v", len(files), err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			e.Apply(t, ns, string(b))
		})
	}
	t.Run("seed-documents", func(t *testing.T) { ctrlSeedDocumentsDryRun(t, e, ns) })
}

// ctrlSeedDocumentsDryRun applies (--dry-run=server, strict field validation) every NeuroNetes
// object example of the seed documents, read verbatim from ../shared/seeds: a field the API lost
// answers "strict decoding error: unknown field".
func ctrlSeedDocumentsDryRun(t *testing.T, e *Env, ns string) {
	dir, err := seeddocs.Dir(e.Root)
	if err != nil {
		t.Fatal(err)
	}
	examples, err := seeddocs.All(dir)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, ex := range examples {
		t.Run(ex.String(), func(t *testing.T) {
			if !ex.IsNeuroNetes() {
				why, ok := seeddocs.SkippedKinds[ex.GroupKind()]
				if !ok {
					t.Fatalf("example of %s is neither NeuroNetes' nor in seeddocs.SkippedKinds", ex.GroupKind())
				}
				t.Skipf("not a NeuroNetes kind: %s", why)
			}
			f := filepath.Join(t.TempDir(), "example.yaml")
			if err := os.WriteFile(f, []byte(ex.YAML), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := e.KubectlErr("apply", "--dry-run=server", "--validate=strict", "-n", ns, "-f", f)
			if err != nil {
				t.Fatalf("refused: %v\n%s", err, ex.YAML)
			}
			t.Logf("%s", strings.TrimSpace(out))
			applied++
		})
	}
	if applied < 9 {
		t.Fatalf("only %d seed examples applied, want >= 9", applied)
	}
}

// TestControllerMalformedPoolsRejected submits malformed AgentPools (dry run) and checks that each
// is rejected with a message naming the field.
func TestControllerMalformedPoolsRejected(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	b, err := os.ReadFile(filepath.Join(e.Root, "api/v1alpha1/testdata/invalid-agentpools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests []struct {
		Name  string         `json:"name"`
		Field string         `json:"field"`
		Spec  map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &tests); err != nil {
		t.Fatal(err)
	}
	if len(tests) < 15 {
		t.Fatalf("only %d malformed cases", len(tests))
	}
	ns := e.Namespace(t, "ctrl-bad")
	for i, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "neuronetes.io/v1alpha1", "kind": "AgentPool",
				"metadata": map[string]any{"name": fmt.Sprintf("bad-%d", i)}, "spec": tt.Spec,
			}}
			_, err := e.Dynamic.Resource(ctrlPoolGVR).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				t.Fatalf("accepted: %v", tt.Spec)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tt.Field) {
				t.Fatalf("message does not name %s: %v", tt.Field, err)
			}
			t.Logf("rejected: %v", err)
		})
	}
}

const ctrlClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata:
  name: demo
spec:
  slo:
    ttft: 500ms
  template:
    spec:
      containers:
      - name: agent
        image: %s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--token-rate=500", "--ttft-base=5ms"]
        ports:
        - containerPort: 8000
        readinessProbe:
          httpGet: {path: /readyz, port: 8000}
          periodSeconds: 1
`

const ctrlPoolYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: demo
spec:
  agentClassRef: {name: demo}
  minReplicas: 2
  maxReplicas: 10
  prewarmPercent: 20
  drainGracePeriodSeconds: 5
  autoscaling:
    useWarmPool: true
    replenishStrategy:
      delay: 10s
      batchSize: 1
`

// TestControllerWarmPool runs the controller against the real cluster: 2 serving + 2 warm pods,
// kubectl scale activates the warm pods first, the warm pool is replenished after the delay, the
// sidecar is injected, and killing the controller during a scale leaves no extra pods.
func TestControllerWarmPool(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-warm")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	// The injected sidecar: the real one when asked for, else the demo agent listening on the
	// sidecar's port, so this test depends on neither Redis nor the sidecar package.
	sidecarImg, sidecarArgs := agentImg, "--listen=127.0.0.1:7070 --model=sidecar-standin"
	if os.Getenv("NEURONETES_E2E_REAL_SIDECAR") == "1" {
		sidecarImg, sidecarArgs = e.Image(t, "sidecar", "./cmd/sidecar"), ""
	}
	ctl := startController(t, e, ns, sidecarImg, sidecarArgs)

	e.Apply(t, ns, fmt.Sprintf(ctrlClassYAML, agentImg))
	e.Apply(t, ns, ctrlPoolYAML)

	waitPool(t, e, ns, "demo", procLogs(ctl), 3*time.Minute, "2 serving and 2 warm Ready pods", func() (bool, error) {
		p := poolPods(t, e, ns, "demo")
		return readyCount(p["serving"]) == 2 && readyCount(p["warm"]) == 2 && len(p["serving"]) == 2 && len(p["warm"]) == 2,
			fmt.Errorf("serving %v (ready %d), warm %v (ready %d)", podNames(p["serving"]), readyCount(p["serving"]), podNames(p["warm"]), readyCount(p["warm"]))
	})
	before := poolPods(t, e, ns, "demo")
	// Sidecar injection.
	for _, p := range append(append([]corev1.Pod{}, before["serving"]...), before["warm"]...) {
		var names []string
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			names = append(names, c.Name)
		}
		if len(names) != 2 || names[0] != "neuronetes-sidecar" || p.Annotations[nnv1.SidecarInjectedAnnotation] == "" {
			t.Fatalf("pod %s init containers + containers %v annotations %v: sidecar not injected once as a native sidecar", p.Name, names, p.Annotations)
		}
	}
	// Warm pods are outside the Service.
	Eventually(t, 30*time.Second, "service endpoints = serving pods", func() (bool, error) {
		got := ctrlEndpoints(t, e, ns, "demo")
		want := ctrlIPs(before["serving"])
		return strings.Join(got, ",") == strings.Join(want, ","), fmt.Errorf("endpoints %v, want %v", got, want)
	})

	// Scale to 4: warm pods are activated, no pod starts.
	warmNames := podNames(before["warm"])
	allBefore := append(podNames(before["serving"]), warmNames...)
	sort.Strings(allBefore)
	start := time.Now()
	e.Kubectl(t, "-n", ns, "scale", "agentpool/demo", "--replicas=4")
	acked := time.Now()
	for {
		p := poolPods(t, e, ns, "demo")
		if readyCount(p["serving"]) == 4 {
			if got := podNames(p["serving"]); strings.Join(got, ",") != strings.Join(allBefore, ",") {
				t.Fatalf("serving pods after scale %v, want the former serving+warm %v (a pod was started)", got, allBefore)
			}
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("warm pods not activated: %v", podNames(p["serving"]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The activated pods answer at once (they were Ready while warm).
	for _, p := range before["warm"] {
		ctrlChat(t, p.Status.PodIP)
	}
	served := time.Since(acked)
	Eventually(t, 30*time.Second, "service endpoints include the activated pods", func() (bool, error) {
		return len(ctrlEndpoints(t, e, ns, "demo")) == 4, nil
	})
	t.Logf("warm activation: kubectl scale took %s; activated pods labelled serving and answering %s after it returned; in the Service's endpoints %s after it returned",
		acked.Sub(start), served, time.Since(acked))
	if served > time.Second {
		t.Errorf("activated pods served %s after the scale (want within 1s)", served)
	}

	// Replenish: nothing before the delay, then one warm pod at a time.
	time.Sleep(5 * time.Second)
	if p := poolPods(t, e, ns, "demo"); len(p["warm"]) != 0 {
		t.Fatalf("warm pool replenished before the 10s delay: %v", podNames(p["warm"]))
	}
	waitPool(t, e, ns, "demo", procLogs(ctl), 2*time.Minute, "warm pool replenished to 2", func() (bool, error) {
		p := poolPods(t, e, ns, "demo")
		return readyCount(p["warm"]) == 2 && len(p["serving"]) == 4, fmt.Errorf("serving %d warm %d (ready %d)", len(p["serving"]), len(p["warm"]), readyCount(p["warm"]))
	})
	if m := ctl.metrics(); !strings.Contains(m, fmt.Sprintf(`neuronetes_warm_pool_activations_total{namespace="%s",pool="demo"} 2`, ns)) {
		t.Errorf("activation metric missing:\n%s", ctrlGrep(m, "neuronetes_"))
	}

	// Kill the controller in the middle of a scale to 8 (2 activations, 2 cold starts, then 2 warm
	// pods to replenish), restart it, and watch the pod count.
	var mu sync.Mutex
	maxSeen := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			l, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=demo"})
			if err == nil {
				n := 0
				for _, p := range l.Items {
					if p.DeletionTimestamp == nil {
						n++
					}
				}
				mu.Lock()
				maxSeen = max(maxSeen, n)
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	e.Kubectl(t, "-n", ns, "scale", "agentpool/demo", "--replicas=8")
	time.Sleep(20 * time.Millisecond)
	ctl.kill()
	time.Sleep(2 * time.Second)
	ctl.start()
	waitPool(t, e, ns, "demo", procLogs(ctl), 3*time.Minute, "8 serving and 2 warm pods after the restart", func() (bool, error) {
		p := poolPods(t, e, ns, "demo")
		return len(p["serving"]) == 8 && readyCount(p["warm"]) == 2 && len(p["warm"]) == 2,
			fmt.Errorf("serving %d warm %d", len(p["serving"]), len(p["warm"]))
	})
	time.Sleep(3 * time.Second) // a quiet period in which no extra pod may appear
	close(stop)
	<-done
	if maxSeen > 8+2 {
		t.Fatalf("saw %d live pool pods, more than 8 serving + 2 warm", maxSeen)
	}
	t.Logf("controller restart during scale: at most %d live pods (limit 10)", maxSeen)

	// Scale down drains serving pods.
	e.Kubectl(t, "-n", ns, "scale", "agentpool/demo", "--replicas=2")
	waitPool(t, e, ns, "demo", procLogs(ctl), time.Minute, "scale down to 2 serving", func() (bool, error) {
		p := poolPods(t, e, ns, "demo")
		return len(p["serving"]) == 2 && len(p["warm"]) == 2, fmt.Errorf("serving %d warm %d", len(p["serving"]), len(p["warm"]))
	})
}

func ctrlChat(t *testing.T, ip string) {
	t.Helper()
	body := `{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}`
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+net.JoinHostPort(ip, "8000")+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatalf("chat to %s: %v", ip, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "tok3") {
		t.Fatalf("chat to %s: %d %s", ip, resp.StatusCode, b)
	}
}

func ctrlIPs(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Status.PodIP)
	}
	sort.Strings(out)
	return out
}

func ctrlEndpoints(t *testing.T, e *Env, ns, svc string) []string {
	l, err := e.Kube.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range l.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			out = append(out, ep.Addresses...)
		}
	}
	sort.Strings(out)
	return out
}

func ctrlGrep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestControllerBenchWarmVsCold measures scale-up from 1 to 2 serving pods with a warm pool
// (activation) against a pool without one (a pod start), on the real cluster. It prints medians
// and their ratio; it asserts nothing about speed. Run by hack/bench.d/45-controller.sh
// (NEURONETES_BENCH=1, rounds from NEURONETES_BENCH_ROUNDS, default 5).
func TestControllerBenchWarmVsCold(t *testing.T) {
	if os.Getenv("NEURONETES_BENCH") != "1" {
		t.Skip("benchmark; set NEURONETES_BENCH=1 (hack/bench.d/45-controller.sh does)")
	}
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	rounds := 5
	if v := os.Getenv("NEURONETES_BENCH_ROUNDS"); v != "" {
		if _, err := fmt.Sscan(v, &rounds); err != nil || rounds < 1 {
			t.Fatalf("NEURONETES_BENCH_ROUNDS=%q", v)
		}
	}
	ns := e.Namespace(t, "ctrl-bench")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	startController(t, e, ns, agentImg, "--listen=127.0.0.1:7070 --model=sidecar-standin")
	e.Apply(t, ns, fmt.Sprintf(ctrlClassYAML, agentImg))
	pool := func(name string, warm bool) string {
		return fmt.Sprintf("apiVersion: neuronetes.io/v1alpha1\nkind: AgentPool\nmetadata:\n  name: %s\nspec:\n  agentClassRef: {name: demo}\n"+
			"  minReplicas: 1\n  maxReplicas: 10\n  prewarmPercent: 10\n  drainGracePeriodSeconds: 1\n  autoscaling:\n    useWarmPool: %v\n"+
			"    replenishStrategy: {delay: 0s, batchSize: 1}\n", name, warm)
	}
	e.Apply(t, ns, pool("warm", true))
	e.Apply(t, ns, pool("cold", false))
	settled := func(name string, warm int) func() (bool, error) {
		return func() (bool, error) {
			l, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=" + name})
			if err != nil {
				return false, err
			}
			if len(l.Items) != 1+warm {
				return false, fmt.Errorf("%d pods", len(l.Items))
			}
			p := poolPods(t, e, ns, name)
			return readyCount(p["serving"]) == 1 && readyCount(p["warm"]) == warm, nil
		}
	}
	scale := func(name string, n int) {
		_, err := e.Dynamic.Resource(ctrlPoolGVR).Namespace(ns).Patch(context.Background(), name, "application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("scale %s: %v", name, err)
		}
	}
	measure := func(name string, warm int) time.Duration {
		Eventually(t, 3*time.Minute, name+" settled", settled(name, warm))
		start := time.Now()
		scale(name, 2)
		for {
			if readyCount(poolPods(t, e, ns, name)["serving"]) == 2 {
				break
			}
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("%s: 2 serving pods not ready", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		d := time.Since(start)
		scale(name, 1)
		return d
	}
	var warmD, coldD []time.Duration
	for i := 0; i < rounds; i++ {
		warmD = append(warmD, measure("warm", 1))
		coldD = append(coldD, measure("cold", 0))
	}
	med := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	mw, mc := med(warmD), med(coldD)
	fmt.Printf("controller bench: scale 1->2 serving Ready, %d rounds\n", rounds)
	fmt.Printf("  %-28s median %8s  all %v\n", "cold (pod start, baseline)", mc.Round(time.Millisecond), coldD)
	fmt.Printf("  %-28s median %8s  all %v\n", "warm (activation)", mw.Round(time.Millisecond), warmD)
	fmt.Printf("  ratio cold/warm: %.1fx\n", float64(mc)/float64(max(mw, time.Microsecond)))
	fmt.Printf("controller bench result: warm_ms=%d cold_ms=%d\n", mw.Milliseconds(), mc.Milliseconds()) // read by 45-controller.sh
}
