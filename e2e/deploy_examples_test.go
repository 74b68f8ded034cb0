package e2e

// Deploy e2e, second part: every example of deploy/examples and the
// dashboard's metrics, against the release that TestDeployLocal installs.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/deploy/grafana"
)

// exampleFiles returns the YAML files of one deploy/examples directory, sorted.
func exampleFiles(t *testing.T, e *Env, dir string) []string {
	files, err := filepath.Glob(filepath.Join(e.Root, "deploy", "examples", dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("examples in %s: %d, %v", dir, len(files), err)
	}
	sort.Strings(files)
	return files
}

// applyExample applies one example file into ns; it returns the error of the first refused object.
// Created objects are deleted at the cleanup of owner (the release's test: later subtests use them).
func applyExample(t, owner *testing.T, e *Env, ns, file string) error {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range decodeObjects(t, string(raw)) {
		if err := e.applyObject(context.Background(), obj, ns, false); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		ri, _ := e.resourceFor(obj, ns)
		name := obj.GetName()
		owner.Cleanup(func() {
			if err := ri.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				owner.Logf("cleanup %s: %v", name, err)
			}
		})
	}
	return nil
}

// waitClaimAllocated waits for a ResourceClaim to be allocated and returns its device names.
func waitClaimAllocated(t *testing.T, e *Env, ns string, match func(*resourceapi.ResourceClaim) bool, what string) []string {
	t.Helper()
	var devices []string
	Eventually(t, 90*time.Second, what+" allocated", func() (bool, error) {
		l, err := e.Kube.ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range l.Items {
			c := &l.Items[i]
			if !match(c) || c.Status.Allocation == nil {
				continue
			}
			devices = devices[:0]
			for _, d := range c.Status.Allocation.Devices.Results {
				devices = append(devices, d.Device)
			}
			return true, nil
		}
		return false, fmt.Errorf("no allocated claim among %d", len(l.Items))
	})
	return devices
}

// ownedBy matches claims generated for a pod.
func ownedBy(pod string) func(*resourceapi.ResourceClaim) bool {
	return func(c *resourceapi.ResourceClaim) bool {
		for _, o := range c.OwnerReferences {
			if o.Kind == "Pod" && o.Name == pod {
				return true
			}
		}
		return false
	}
}

// deviceAttr returns a string attribute of a device published by the driver on the node.
func deviceAttr(t *testing.T, e *Env, device, attr string) string {
	l, err := e.Kube.ResourceV1().ResourceSlices().List(context.Background(), nodeSlices(e))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				if a, ok := d.Attributes[resourceapi.QualifiedName(attr)]; ok && a.StringValue != nil {
					return *a.StringValue
				}
				return ""
			}
		}
	}
	t.Fatalf("device %s is not published", device)
	return ""
}

func deployExamples(t *testing.T, e *Env, r *deployRelease) {
	ns := r.exampleNS
	ctx := context.Background()
	gpu := exampleFiles(t, e, "gpu-claims")
	for _, f := range gpu {
		if err := applyExample(t, r.t, e, ns, f); err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
	}
	// Driver scenario 1: a whole GPU.
	dev := waitClaimAllocated(t, e, ns, ownedBy("whole-gpu"), "whole-GPU claim")
	if len(dev) != 1 || deviceAttr(t, e, dev[0], "type") != "gpu" {
		t.Errorf("whole-gpu got devices %v, want one whole GPU", dev)
	}
	e.WaitPodRunning(t, ns, "whole-gpu", 90*time.Second)
	// Driver scenario 2: a MIG slice, created at prepare time.
	dev = waitClaimAllocated(t, e, ns, ownedBy("mig-slice"), "MIG claim")
	if len(dev) != 1 || deviceAttr(t, e, dev[0], "profile") != "1g.5gb" {
		t.Errorf("mig-slice got devices %v, want one 1g.5gb MIG device", dev)
	}
	e.WaitPodRunning(t, ns, "mig-slice", 90*time.Second)
	// Two NVLinked GPUs: same nvlinkDomain.
	dev = waitClaimAllocated(t, e, ns, ownedBy("nvlinked-pair"), "NVLinked pair claim")
	if len(dev) != 2 || deviceAttr(t, e, dev[0], "nvlinkDomain") == "" ||
		deviceAttr(t, e, dev[0], "nvlinkDomain") != deviceAttr(t, e, dev[1], "nvlinkDomain") {
		t.Errorf("nvlinked-pair got devices %v, want 2 GPUs of one NVLink domain", dev)
	}
	e.WaitPodRunning(t, ns, "nvlinked-pair", 90*time.Second)
	// A time-sliced GPU shared by two pods.
	waitClaimAllocated(t, e, ns, func(c *resourceapi.ResourceClaim) bool { return c.Name == "shared-gpu" }, "shared claim")
	e.WaitPodRunning(t, ns, "shared-gpu-a", 90*time.Second)
	e.WaitPodRunning(t, ns, "shared-gpu-b", 90*time.Second)
	shared, err := e.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, "shared-gpu", metav1.GetOptions{})
	if err != nil || len(shared.Status.ReservedFor) != 2 {
		t.Errorf("shared-gpu reserved for %v (err %v), want both pods", shared.Status.ReservedFor, err)
	}

	for _, f := range exampleFiles(t, e, "autoscaling") {
		err := applyExample(t, r.t, e, ns, f)
		if strings.HasPrefix(filepath.Base(f), "90-rejected-") {
			// Refused on purpose by the CRD's validation: the error must name the bad field.
			if err == nil || !strings.Contains(err.Error(), "minReplicas") {
				t.Errorf("%s: got %v, want a rejection naming minReplicas", filepath.Base(f), err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
	}
	for _, f := range exampleFiles(t, e, "agent-pool-on-mig") {
		if err := applyExample(t, r.t, e, ns, f); err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
	}
	logs := releaseLogs(e, r.namespace)
	for pool, want := range map[string]int64{"multi-metric": 1, "slo-budget": 1, "predictive": 1, "mig-agents": 2} {
		waitPoolReady(t, e, ns, pool, logs, want, 3*time.Minute)
	}
	// Walkthrough: 3 warm pods hold MIG slices, every pod carries the injected sidecar.
	waitPool(t, e, ns, "mig-agents", logs, 2*time.Minute, "mig-agents warm pool of 3", func() (bool, error) {
		p, err := poolStatus(e, ns, "mig-agents")
		return err == nil && p["warmReplicas"] == int64(3), fmt.Errorf("status %v: %v", p, err)
	})
	pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "neuronetes.io/pool=mig-agents"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !hasContainer(&p, "neuronetes-sidecar") {
			t.Errorf("pool pod %s has no injected sidecar", p.Name)
		}
		if len(p.Spec.ResourceClaims) == 0 {
			t.Errorf("pool pod %s has no GPU claim", p.Name)
		}
	}
	// The walkthrough's scale-up of an autoscaled pool: a floor of 4 through minReplicas (the
	// autoscaler owns spec.replicas; the reconciler clamps to the new floor at once).
	warm := podsInState(t, e, ns, "mig-agents", "warm")
	e.Kubectl(t, "patch", "agentpool/mig-agents", "-n", ns, "--type=merge", "-p", `{"spec":{"minReplicas":4}}`)
	waitPool(t, e, ns, "mig-agents", logs, time.Minute, "4 serving mig-agents, activated from the warm pool", func() (bool, error) {
		serving := podsInState(t, e, ns, "mig-agents", "serving")
		activated := 0
		for _, w := range warm {
			for _, s := range serving {
				if w == s {
					activated++
				}
			}
		}
		return len(serving) == 4 && activated == 2, fmt.Errorf("serving %v, warm before %v", serving, warm)
	})
	// kubectl scale of the autoscaled pool: the autoscaler re-decides at once and puts its own count
	// back (the idle pool's floor, 4), saying so in a ManualScaleOverridden Event.
	e.Kubectl(t, "scale", "agentpool/mig-agents", "-n", ns, "--replicas", "6")
	msg := waitManualScaleReplaced(t, e, ns, "mig-agents", logs, 4, 30*time.Second, "the autoscaler to replace a kubectl scale to 6 by its decision")
	t.Logf("[e2e] kubectl scale of an autoscaled pool: %s", msg)
}

// hasContainer reports whether the pod has a container or init container (a native sidecar) name.
func hasContainer(p *corev1.Pod, name string) bool {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

// podsInState lists the names of a pool's pods labelled with state.
func podsInState(t *testing.T, e *Env, ns, pool, state string) []string {
	l, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "neuronetes.io/pool=" + pool + ",neuronetes.io/state=" + state})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// poolStatus returns an AgentPool's status as a map with int64 numbers.
func poolStatus(e *Env, ns, name string) (map[string]any, error) {
	out, err := e.KubectlErr("get", "agentpool", name, "-n", ns, "-o", "jsonpath={.status}")
	if err != nil {
		return nil, err
	}
	var st map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("status %q: %w", out, err)
	}
	for k, v := range st {
		if n, ok := v.(json.Number); ok {
			st[k], _ = n.Int64()
		}
	}
	return st, nil
}

// scrape fetches a Prometheus text endpoint and adds its families (name -> type) to fam.
func scrape(url string, fam map[string]string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	for name, f := range families {
		fam[name] = strings.ToLower(f.GetType().String())
	}
	return nil
}

func post(url, body string, hdr ...string) error {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	return nil
}

// deployDashboardMetrics drives the components so every series the dashboard queries exists
// (a scale-up and a scale-down, a chat completion, a vector search that misses), scrapes the
// controller, an agent pod and a sidecar, and checks each name of the dashboard against them.
func deployDashboardMetrics(t *testing.T, e *Env, r *deployRelease) {
	ns := r.exampleNS
	d, err := grafana.Load()
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.MetricNames()
	if err != nil {
		t.Fatal(err)
	}
	// A scale-down after the Examples scale-up, so both counters have a series: the floor back to
	// 2 (a policy change starts the autoscaler's history afresh, so the idle pool shrinks at once).
	e.Kubectl(t, "patch", "agentpool/mig-agents", "-n", ns, "--type=merge", "-p", `{"spec":{"minReplicas":2}}`)
	fam := map[string]string{}
	// The controller's metrics port through its Service's ClusterIP (kube-proxy serves the host too).
	svc, err := e.Kube.CoreV1().Services(r.namespace).Get(context.Background(), r.name+"-neuronetes-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrlMetrics := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(deployCtrlMetrics)))
	Eventually(t, time.Minute, "controller scale-down metric", func() (bool, error) {
		clear(fam)
		if err := scrape(ctrlMetrics, fam); err != nil {
			return false, err
		}
		_, up := fam["neuronetes_scale_up_total"]
		_, down := fam["neuronetes_scale_down_total"]
		return up && down, fmt.Errorf("scale_up %v, scale_down %v", up, down)
	})
	// An agent of the walkthrough pool: one chat completion makes its request metrics appear.
	serving := podsInState(t, e, ns, "mig-agents", "serving")
	if len(serving) == 0 {
		t.Fatal("no serving mig-agents pod")
	}
	pod, err := e.Kube.CoreV1().Pods(ns).Get(context.Background(), serving[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agent := "http://" + pod.Status.PodIP + ":8000"
	if err := post(agent+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`, "X-Conversation-ID", "e2e-dash"); err != nil {
		t.Fatal(err)
	}
	if err := scrape(agent+"/metrics", fam); err != nil {
		t.Fatal(err)
	}
	// The injected sidecar serves on the pod's loopback only; run the same binary on the host with
	// the same Redis and count a vector search that finds fewer than k results.
	keys := t.TempDir()
	for f, v := range map[string]string{"active": "k1", "k1": "3q2+7w0FtVxk0m7h8Qz3bJ9yT2aW1cE4rU6iO5pL8sA="} {
		if err := os.WriteFile(filepath.Join(keys, f), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sc := exec.Command(e.HostBinary(t, "./cmd/sidecar"), "--http-addr=127.0.0.1:17070", "--grpc-addr=", "--unix-socket=",
		"--redis-addr="+r.redisAddr, "--keys-dir="+keys, "--namespace="+ns, "--agent-class=mig-agent")
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Process.Kill(); _ = sc.Wait() })
	Eventually(t, 30*time.Second, "host sidecar vector insert", func() (bool, error) {
		err := post("http://127.0.0.1:17070/v1/vectors", `{"id":"doc-1","vector":[0.1,0.2,0.3]}`)
		return err == nil, err
	})
	// One vector stored, three wanted: a retrieval miss.
	if err := post("http://127.0.0.1:17070/v1/vectors/search", `{"vector":[0.1,0.2,0.3],"k":3}`); err != nil {
		t.Fatal(err)
	}
	if err := scrape("http://127.0.0.1:17070/metrics", fam); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, n := range names {
		if !grafana.Exported(n, fam) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the dashboard queries metrics no component exports: %v", missing)
	}
	t.Logf("[e2e] %d dashboard metrics all exported (%d families scraped)", len(names), len(fam))
}
