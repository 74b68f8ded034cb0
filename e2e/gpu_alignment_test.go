package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/e2e/scale"
)

// alignedClassYAML is an AgentClass (%[1]s) of %[2]d whole GPUs per pod on one kwok node (%[3]s),
// with the spec.gpu fields %[4]s, and its one-replica pool.
const alignedClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: %[1]s}
spec:
  gpu: {count: %[2]d%[4]s}
  template:
    spec:
      nodeSelector: {kubernetes.io/hostname: %[3]s}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - {name: agent, image: neuronetes.local/never-pulled:dev}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: %[1]s}
spec: {replicas: 1, minReplicas: 1, maxReplicas: 1, prewarmPercent: 0, drainGracePeriodSeconds: 1}
`

// TestGPUAlignmentOnKwok: spec.gpu.alignment NUMANode through the real scheduler's allocator. A
// kwok node publishes the driver's whole-GPU slice of dgxh100 (GPUs 0-3 on NUMA node 0, 4-7 on 1).
// With one GPU taken, a pod of 4 GPUs without alignment gets GPUs of both NUMA nodes (the control:
// without it the check below could not fail); with alignment NUMANode it gets 4 GPUs of one NUMA
// node. A class change rewrites the class's immutable ResourceClaimTemplate.
func TestGPUAlignmentOnKwok(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-align")
	ctx := context.Background()
	runID := kwokRun(t, e)
	ensureGPUDeviceClass(t, e)
	nodes, err := scale.CreateNodes(ctx, e.Kube, runID, "nn-align-"+ns[len(ns)-5:]+"-", 0, 1, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := scale.LayoutByName(scale.LayoutWhole)
	if _, err := scale.PublishSlices(ctx, e.Kube, nodes, "dgxh100", whole, runID); err != nil {
		t.Fatal(err)
	}
	node := nodes[0].Name
	numa := deviceNUMA(t, e, node)
	startController(t, e, ns, "neuronetes.local/never-pulled:dev", "", "--sidecar-keys-secret=", "--sidecar-redis-secret=")

	e.Apply(t, ns, fmt.Sprintf(alignedClassYAML, "one", 1, node, ""))
	one := allocatedGPUs(t, e, ns, "one")
	e.Apply(t, ns, fmt.Sprintf(alignedClassYAML, "span", 4, node, ""))
	span := allocatedGPUs(t, e, ns, "span")
	if numaNodes(numa, span) < 2 {
		t.Fatalf("control: 4 GPUs without alignment got %v (NUMA %v) beside %v: one NUMA node, so this layout cannot show alignment", span, numaOf(numa, span), one)
	}
	e.Kubectl(t, "-n", ns, "delete", "agentpool", "span", "--wait=true", "--timeout=60s")
	waitClaimsGone(t, e, ns, "span")

	e.Apply(t, ns, fmt.Sprintf(alignedClassYAML, "aligned", 4, node, ", alignment: NUMANode"))
	aligned := allocatedGPUs(t, e, ns, "aligned")
	if numaNodes(numa, aligned) != 1 || len(aligned) != 4 {
		t.Errorf("alignment NUMANode: 4 GPUs wanted on one NUMA node, got %v (NUMA %v)", aligned, numaOf(numa, aligned))
	}
	t.Logf("GPU %v taken; without alignment 4 GPUs %v (NUMA %v); with alignment NUMANode %v (NUMA %v)",
		one, span, numaOf(numa, span), aligned, numaOf(numa, aligned))

	// A ResourceClaimTemplate's spec is immutable: changing the class's spec.gpu rewrites it.
	before := e.Kubectl(t, "-n", ns, "get", "resourceclaimtemplate", "aligned-gpu", "-o", "jsonpath={.metadata.uid}")
	e.Kubectl(t, "-n", ns, "patch", "agentclass", "aligned", "--type=merge", "-p", `{"spec":{"gpu":{"count":2}}}`)
	var rewritten string
	Eventually(t, 30*time.Second, "template aligned-gpu rewritten with count 2", func() (bool, error) {
		tmpl, err := e.Kube.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "aligned-gpu", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		d := tmpl.Spec.Spec.Devices
		ok := string(tmpl.UID) != before && d.Requests[0].Exactly.Count == 2 && len(d.Constraints) == 1 &&
			*d.Constraints[0].MatchAttribute == resourcev1.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode)
		rewritten = string(tmpl.UID)
		return ok, fmt.Errorf("template uid %s (before %s), requests %+v, constraints %+v", tmpl.UID, before, d.Requests, d.Constraints)
	})
	// An unchanged class keeps its template: a reconcile (forced by an annotation) rewrites nothing,
	// even with the apiserver's defaults in the stored spec.
	e.Kubectl(t, "-n", ns, "annotate", "agentclass", "aligned", "e2e.neuronetes.io/touch=1")
	time.Sleep(5 * time.Second)
	if uid := e.Kubectl(t, "-n", ns, "get", "resourceclaimtemplate", "aligned-gpu", "-o", "jsonpath={.metadata.uid}"); uid != rewritten {
		t.Errorf("template aligned-gpu rewritten again for an unchanged class: uid %s, was %s", uid, rewritten)
	}
}

// ensureGPUDeviceClass applies the driver's whole-GPU DeviceClass when the cluster has none, and
// deletes it at cleanup only then (other tests may share it).
func ensureGPUDeviceClass(t *testing.T, e *Env) {
	t.Helper()
	if _, err := e.Kube.ResourceV1().DeviceClasses().Get(context.Background(), model.DriverName, metav1.GetOptions{}); err == nil {
		return
	}
	path := filepath.Join(e.Root, "deploy", "deviceclasses", "gpu.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	e.Kubectl(t, "apply", "--server-side", "--field-manager=neuronetes-e2e-align", "-f", path)
	t.Cleanup(func() {
		_ = e.Kube.ResourceV1().DeviceClasses().Delete(context.Background(), model.DriverName, metav1.DeleteOptions{})
	})
}

// deviceNUMA maps each whole GPU the driver's slices publish for node to its NUMA node.
func deviceNUMA(t *testing.T, e *Env, node string) map[string]int64 {
	t.Helper()
	l, err := e.Kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			if v := d.Attributes[deviceattribute.StandardDeviceAttributeNUMANode].IntValue; v != nil {
				out[d.Name] = *v
			}
		}
	}
	if len(out) != 8 {
		t.Fatalf("node %s publishes %d GPUs with a NUMA node, want 8: %v", node, len(out), out)
	}
	return out
}

// allocatedGPUs waits for the pool's pod to be bound and returns the devices of its claim, sorted.
func allocatedGPUs(t *testing.T, e *Env, ns, pool string) []string {
	t.Helper()
	var devices []string
	Eventually(t, 90*time.Second, "pool "+pool+": a bound pod with an allocated claim", func() (bool, error) {
		pods := poolPods(t, e, ns, pool)["serving"]
		if len(pods) != 1 || pods[0].Spec.NodeName == "" || len(pods[0].Status.ResourceClaimStatuses) != 1 {
			return false, fmt.Errorf("%d serving pods, not bound with a claim", len(pods))
		}
		name := pods[0].Status.ResourceClaimStatuses[0].ResourceClaimName
		if name == nil {
			return false, fmt.Errorf("pod %s: no claim generated", pods[0].Name)
		}
		c, err := e.Kube.ResourceV1().ResourceClaims(ns).Get(context.Background(), *name, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil {
			return false, fmt.Errorf("claim %s not allocated: %v", *name, err)
		}
		devices = claimDevices(c)
		return true, nil
	})
	return devices
}

func claimDevices(c *resourcev1.ResourceClaim) []string {
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Device)
	}
	sort.Strings(out)
	return out
}

// waitClaimsGone waits until no claim of the pool's pods is left (its devices are free).
func waitClaimsGone(t *testing.T, e *Env, ns, pool string) {
	t.Helper()
	Eventually(t, 90*time.Second, "claims of pool "+pool+" deleted", func() (bool, error) {
		l, err := e.Kube.ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range l.Items {
			if strings.HasPrefix(c.Name, pool+"-") {
				return false, fmt.Errorf("claim %s left", c.Name)
			}
		}
		return true, nil
	})
}

func numaOf(numa map[string]int64, devices []string) []int64 {
	var out []int64
	for _, d := range devices {
		out = append(out, numa[d])
	}
	return out
}

func numaNodes(numa map[string]int64, devices []string) int {
	seen := map[int64]bool{}
	for _, d := range devices {
		seen[numa[d]] = true
	}
	return len(seen)
}
