package e2e

// Gang placement (issue 33 item 1) on the local cluster's kube-scheduler with the Workload API
// gates on: AgentClass spec.gang makes each replica a PodGroup of size pods placed all or nothing,
// on kwok nodes that each offer 2 "GPUs" of one NVLink domain (the extended resource below).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/e2e/scale"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// gangGPU is the extended resource the kwok nodes offer, 2 per node: one node stands for one
// NVLink domain of 2 GPUs.
const gangGPU = "e2e.neuronetes.io/gpu"

const gangClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata:
  name: %[1]s
spec:
  gang: {size: %[2]d%[3]s}
  template:
    spec:
      nodeSelector: {neuronetes.io/e2e-gang: "%[4]s"}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - name: agent
        image: neuronetes.local/never-pulled:dev
        resources:
          limits: {"e2e.neuronetes.io/gpu": "1"}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: %[1]s
spec:
  replicas: 1
  minReplicas: 1
  maxReplicas: 2
  prewarmPercent: 0
  drainGracePeriodSeconds: 1
`

// TestGangPlacementOnKwok: (b) a 2-pod gang whose GPUs must share an NVLink domain stays Pending
// whole while only single GPUs are free on two nodes, (a) is placed together on one node once one
// node has 2 free, (c) two gangs competing for 2 GPUs never bind in part, and an NVLink gang over
// the largest domain is rejected naming spec.gang.size.
func TestGangPlacementOnKwok(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-gang")
	ctx := context.Background()
	runID := kwokRun(t, e)

	// Bad input first: 5 pods × 2 GPUs on one NVLink domain is over the largest (8).
	_, err := e.applier.Apply(ctx, ns, `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: too-big}
spec:
  gpu: {count: 2}
  gang: {size: 5, topology: NVLinkDomain}
`)
	if err == nil || !strings.Contains(err.Error(), "spec.gang.size") {
		t.Fatalf("gang over the largest NVLink domain: err %v, want a rejection naming spec.gang.size", err)
	}
	t.Logf("rejected as expected: %v", err)

	nodes := gangNodes(t, e, ns, runID, 2, 2)
	nodeA, nodeB := nodes[0], nodes[1]

	// One plain pod of 1 GPU on each node: 2 GPUs free in total, 1 per NVLink domain.
	filler := func(name, node string) {
		e.Apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  tolerations:
  - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: neuronetes.local/never-pulled:dev
    resources:
      limits: {"e2e.neuronetes.io/gpu": "1"}
`, name, node))
	}
	filler("filler-a", nodeA)
	filler("filler-b", nodeB)
	Eventually(t, time.Minute, "fillers bound", func() (bool, error) {
		for _, n := range []string{"filler-a", "filler-b"} {
			p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName == "" {
				return false, fmt.Errorf("%s not bound (%v)", n, err)
			}
		}
		return true, nil
	})

	ctl := startController(t, e, ns, "neuronetes.local/never-pulled:dev", "", "--sidecar-keys-secret=", "--sidecar-redis-secret=")

	// Control: the same 2 pods without a gang bind at once, one per domain, which is what the gang
	// below must not do.
	e.Apply(t, ns, strings.Replace(strings.Replace(fmt.Sprintf(gangClassYAML, "plain", 2, "", ns), "  gang: {size: 2}\n", "", 1), "replicas: 1\n", "replicas: 2\n", 1))
	waitPool(t, e, ns, "plain", procLogs(ctl), time.Minute, "control pool plain (no gang): 2 pods bound, one per node", func() (bool, error) {
		where := map[string]bool{}
		for _, p := range poolPods(t, e, ns, "plain")["serving"] {
			if p.Spec.NodeName != "" {
				where[p.Spec.NodeName] = true
			}
		}
		return len(where) == 2, fmt.Errorf("bound on %v", where)
	})
	e.Kubectl(t, "-n", ns, "delete", "agentpool", "plain", "--wait=true")
	if err := e.Kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "neuronetes.io/pool=plain"}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, "control pods gone", func() (bool, error) {
		return len(poolPods(t, e, ns, "plain")["serving"]) == 0, nil
	})
	t.Logf("control: without a gang the 2 pods bound split across the 2 nodes")
	e.Apply(t, ns, fmt.Sprintf(gangClassYAML, "nvl", 2, ", topology: NVLinkDomain", ns))

	// (b) 2 GPUs are free but on two domains: the gang stays Pending whole.
	waitPool(t, e, ns, "nvl", procLogs(ctl), time.Minute, "gang nvl: PodGroup and 2 pods created", func() (bool, error) {
		pods := poolPods(t, e, ns, "nvl")["serving"]
		_, err := e.KubectlErr("-n", ns, "get", "podgroups.scheduling.k8s.io", "nvl-g0")
		return len(pods) == 2 && err == nil, fmt.Errorf("%d pods, podgroup: %v", len(pods), err)
	})
	pg := e.Kubectl(t, "-n", ns, "get", "podgroups.scheduling.k8s.io", "nvl-g0", "-o", "jsonpath={.spec.schedulingPolicy.gang.minCount} {.spec.schedulingConstraints.topology[0].key}")
	if pg != "2 kubernetes.io/hostname" {
		t.Errorf("podgroup nvl-g0 minCount/topology = %q, want \"2 kubernetes.io/hostname\"", pg)
	}
	if wl := e.Kubectl(t, "-n", ns, "get", "workloads.scheduling.k8s.io", "nvl", "-o", "jsonpath={.spec.podGroupTemplates[0].name} {.spec.podGroupTemplates[0].schedulingPolicy.gang.minCount}"); wl != "replica 2" {
		t.Errorf("workload nvl template = %q, want \"replica 2\"", wl)
	}
	holdWhole(t, e, ns, 20*time.Second, map[string]int{"nvl": 2}, func(bound map[string]int) error {
		if bound["nvl"] != 0 {
			return fmt.Errorf("gang nvl has %d of 2 pods bound while no domain has 2 free GPUs", bound["nvl"])
		}
		return nil
	})

	// (a) One node gets 2 free GPUs: the gang lands there, both pods together.
	if err := e.Kube.CoreV1().Pods(ns).Delete(ctx, "filler-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitPool(t, e, ns, "nvl", procLogs(ctl), 2*time.Minute, "gang nvl: both pods Ready on one node", func() (bool, error) {
		pods := poolPods(t, e, ns, "nvl")["serving"]
		where := map[string]bool{}
		for _, p := range pods {
			where[p.Spec.NodeName] = true
		}
		st, err := poolStatus(e, ns, "nvl")
		if err != nil {
			return false, err
		}
		rr, _ := st["readyReplicas"].(int64)
		return readyCount(pods) == 2 && len(where) == 1 && where[nodeA] && rr == 1,
			fmt.Errorf("ready %d, nodes %v, status readyReplicas %d", readyCount(pods), where, rr)
	})
	t.Logf("gang nvl placed on %s %.1fs after the domain freed", nodeA, time.Since(start).Seconds())

	// (c) Two gangs of 2 (no topology) compete for the 2 GPUs node B has once its filler leaves:
	// one binds whole, the other binds nothing.
	if err := e.Kube.CoreV1().Pods(ns).Delete(ctx, "filler-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, "filler-b gone", func() (bool, error) {
		_, err := e.Kube.CoreV1().Pods(ns).Get(ctx, "filler-b", metav1.GetOptions{})
		return err != nil, nil
	})
	cStart := time.Now()
	e.Apply(t, ns, fmt.Sprintf(gangClassYAML, "c1", 2, "", ns))
	e.Apply(t, ns, fmt.Sprintf(gangClassYAML, "c2", 2, "", ns))
	placed := time.Duration(0)
	holdWhole(t, e, ns, 30*time.Second, map[string]int{"c1": 2, "c2": 2}, func(b map[string]int) error {
		if placed == 0 && b["c1"]+b["c2"] == 2 {
			placed = time.Since(cStart)
		}
		return nil
	})
	t.Logf("contention: first gang bound whole %.1fs after both pools were applied", placed.Seconds())
	bound := gangBound(t, e, ns, []string{"c1", "c2"})
	if bound["c1"]+bound["c2"] != 2 {
		t.Errorf("after 30 s: bound %v, want one gang of 2 placed (2 GPUs free)", bound)
	}
}

// gangBound counts each pool's pods with a node.
func gangBound(t *testing.T, e *Env, ns string, pools []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range pools {
		for _, pod := range poolPods(t, e, ns, p)["serving"] {
			if pod.Spec.NodeName != "" {
				out[p]++
			}
		}
	}
	return out
}

// holdWhole samples the pools' pods every 500 ms for d and fails if any gang is ever bound in
// part (some but not all of its size pods on nodes) or check fails.
func holdWhole(t *testing.T, e *Env, ns string, d time.Duration, size map[string]int, check func(map[string]int) error) {
	t.Helper()
	pools := make([]string, 0, len(size))
	for p := range size {
		pools = append(pools, p)
	}
	samples := 0
	since := map[string]time.Time{} // when each gang was first seen bound in part, in a row
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		bound := gangBound(t, e, ns, pools)
		samples++
		now := time.Now()
		for p, n := range size {
			if b := bound[p]; b == 0 || b == n {
				delete(since, p)
				continue
			}
			if _, ok := since[p]; !ok {
				since[p] = now
			}
			// The scheduler decides a gang whole and binds its pods one by one.
			if now.Sub(since[p]) > bindSpread {
				t.Fatalf("gang %s bound in part for over %s: %d of %d pods on nodes (sample %d)", p, bindSpread, bound[p], n, samples)
			}
		}
		if check != nil {
			if err := check(bound); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d samples over %s: no gang of %v bound in part for over %s", samples, d, pools, bindSpread)
}

// gangNodes creates n kwok nodes of run runID labelled neuronetes.io/e2e-gang=ns (the gang
// classes' nodeSelector), each offering gpus of gangGPU, and returns their names once the
// scheduler can see the GPUs.
func gangNodes(t *testing.T, e *Env, ns, runID string, n, gpus int) []string {
	t.Helper()
	ctx := context.Background()
	prefix := "nn-gang-" + ns[len(ns)-5:] + "-"
	nodes, err := scale.CreateNodes(ctx, e.Kube, runID, prefix, 0, n, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, n)
	q := resource.NewQuantity(int64(gpus), resource.DecimalSI).String()
	for _, node := range nodes {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"neuronetes.io/e2e-gang": ns}}})
		if _, err := e.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		st, _ := json.Marshal(map[string]any{"status": map[string]any{
			"capacity": map[string]any{gangGPU: q}, "allocatable": map[string]any{gangGPU: q}}})
		if _, err := e.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, st, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		names = append(names, node.Name)
	}
	Eventually(t, 30*time.Second, fmt.Sprintf("kwok nodes offer %d %s", gpus, gangGPU), func() (bool, error) {
		for _, name := range names {
			node, err := e.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if q := node.Status.Allocatable[corev1.ResourceName(gangGPU)]; q.Value() != int64(gpus) {
				return false, fmt.Errorf("%s allocatable %s = %s", name, gangGPU, q.String())
			}
		}
		return true, nil
	})
	return names
}
