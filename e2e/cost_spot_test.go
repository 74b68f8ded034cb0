package e2e

// Cost- and spot-aware pools (issue 29) on the local cluster with kwok nodes labelled as Karpenter
// spot / on-demand capacity, priced by the node annotation and by the price table ConfigMap, and
// tainted to interrupt.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/scale"
)

const costClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata:
  name: kwok
spec:
  template:
    spec:
      nodeSelector: {neuronetes.io/e2e-cost: "%s"}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - name: agent
        image: neuronetes.local/never-pulled:dev
`

// costODClassYAML pins the budget pool to the on-demand node, so its price is the table's.
const costODClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata:
  name: kwok-od
spec:
  template:
    spec:
      nodeSelector: {kubernetes.io/hostname: "%s"}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - name: agent
        image: neuronetes.local/never-pulled:dev
`

const costPoolsYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: spot
spec:
  agentClassRef: {name: kwok}
  replicas: 2
  minReplicas: 2
  maxReplicas: 4
  prewarmPercent: 0
  drainGracePeriodSeconds: 1
  autoscaling:
    metrics: [{type: concurrent-sessions, target: "8"}]
    costConstraints:
      optimization: {preferSpot: true, spotMaxPrice: 5.0}
    spotStrategy:
      enabled: true
      maxSpotPercent: 50
      onInterruption: {action: migrate-to-on-demand, timeout: 20s}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: budget
spec:
  agentClassRef: {name: kwok-od}
  replicas: 2
  minReplicas: 1
  maxReplicas: 4
  prewarmPercent: 0
  drainGracePeriodSeconds: 1
  autoscaling:
    metrics: [{type: concurrent-sessions, target: "8"}]
    costConstraints:
      dailyBudget: 0.01
      onBudgetExceeded: [scale-to-min, use-fallback-model, enable-spot]
      fallbackPoolRef: {name: small}
`

// TestControllerCostAndSpotOnKwok: a spot pod lands on the spot node priced under spotMaxPrice
// (not on the dearer one), the on-demand pod on on-demand capacity; status.cost prices the budget
// pool from the price table; its budget actions fire with Events and conditions and clear when
// the budget is raised; an interruption taint moves the spot pool to on-demand capacity.
func TestControllerCostAndSpotOnKwok(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-cost")
	ctx := context.Background()
	runID := kwokRun(t, e)
	prefix := "nn-cost-" + ns[len(ns)-5:] + "-"
	nodes, err := scale.CreateNodes(ctx, e.Kube, runID, prefix, 0, 3, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cheap, dear, onDemand := nodes[0].Name, nodes[1].Name, nodes[2].Name
	labelNode := func(name, capacity, price string) {
		ann := map[string]any{}
		if price != "" {
			ann["neuronetes.io/price-per-hour"] = price
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"labels":      map[string]string{"neuronetes.io/e2e-cost": ns, "karpenter.sh/capacity-type": capacity, corev1.LabelInstanceTypeStable: "g5.12xlarge"},
			"annotations": ann}})
		if _, err := e.Kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labelNode(cheap, "spot", "3")
	labelNode(dear, "spot", "9")
	labelNode(onDemand, "on-demand", "") // priced by the table: g5.12xlarge.on-demand = 6
	e.Apply(t, ns, `apiVersion: v1
kind: ConfigMap
metadata: {name: node-prices}
data: {g5.12xlarge.on-demand: "6", g5.12xlarge.spot: "9"}
`)
	ctl := startController(t, e, ns, "neuronetes.local/never-pulled:dev", "", "--autoscaler=true",
		"--autoscaler-sync-period=2s", "--price-table="+ns+"/node-prices", "--sidecar-keys-secret=", "--sidecar-redis-secret=")
	e.Apply(t, ns, fmt.Sprintf(costClassYAML, ns))
	e.Apply(t, ns, fmt.Sprintf(costODClassYAML, onDemand))
	e.Apply(t, ns, costPoolsYAML)

	// Spot placement under the price cap.
	waitPool(t, e, ns, "spot", procLogs(ctl), 2*time.Minute, "spot pool: 2 Ready pods, the spot one on the cheap spot node", func() (bool, error) {
		pods := poolPods(t, e, ns, "spot")["serving"]
		where := map[string]string{}
		for _, p := range pods {
			where[p.Labels[nnv1.CapacityLabel]] = p.Spec.NodeName
		}
		return readyCount(pods) == 2 && where["spot"] == cheap && where["on-demand"] == onDemand,
			fmt.Errorf("ready %d, capacity -> node %v (cheap %s, dear %s, on-demand %s)", readyCount(pods), where, cheap, dear, onDemand)
	})

	// The budget pool: priced from the table, over its $0.01 budget within seconds.
	var cs *nnv1.CostStatus
	waitPool(t, e, ns, "budget", procLogs(ctl), 2*time.Minute, "budget pool: every budget action in force", func() (bool, error) {
		cs = costStatus(t, e, ns, "budget")
		if cs == nil {
			return false, fmt.Errorf("no status.cost")
		}
		return condTrue(cs, nnv1.CostBudgetExceeded) && condTrue(cs, nnv1.CostScaledToMin) && condTrue(cs, nnv1.CostFallbackActive) &&
			condTrue(cs, nnv1.CostSpotEnabled) && cs.Fallback != nil && cs.Fallback.PoolRef.Name == "small" &&
			cs.Fallback.Scope == nnv1.FallbackAllSessions && cs.SpotPercent != nil, fmt.Errorf("status.cost %+v", cs)
	})
	if cs.PricePerHour != "6" {
		// 2 pods on the on-demand node split its $6; after scale-to-min 1 pod pays all of it.
		t.Errorf("pricePerHour %s, want 6 (the table's on-demand price of the node)", cs.PricePerHour)
	}
	Eventually(t, time.Minute, "scale-to-min: budget pool at minReplicas", func() (bool, error) {
		return len(poolPods(t, e, ns, "budget")["serving"]) == 1, nil
	})
	if ev := e.Kubectl(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=budget", "-o", "jsonpath={range .items[*]}{.reason} {.message}{\"\\n\"}{end}"); !strings.Contains(ev, "CostActionFired BudgetExceeded") ||
		!strings.Contains(ev, "CostActionFired SpotEnabled") {
		t.Errorf("events of the budget pool lack CostActionFired:\n%s", ev)
	}
	// Raising the budget clears every action.
	e.Kubectl(t, "-n", ns, "patch", "agentpool/budget", "--type=merge", "-p", `{"spec":{"autoscaling":{"costConstraints":{"dailyBudget":1000}}}}`)
	waitPool(t, e, ns, "budget", procLogs(ctl), time.Minute, "budget raised: actions cleared", func() (bool, error) {
		cs = costStatus(t, e, ns, "budget")
		return cs != nil && !condTrue(cs, nnv1.CostBudgetExceeded) && cs.Fallback == nil && cs.SpotPercent == nil && len(cs.ActiveActions) == 0,
			fmt.Errorf("status.cost %+v", cs)
	})
	if ev := e.Kubectl(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=budget,reason=CostActionCleared", "-o", "jsonpath={.items[*].message}"); !strings.Contains(ev, "BudgetExceeded") {
		t.Errorf("no CostActionCleared BudgetExceeded event: %q", ev)
	}

	// Interruption: the cheap spot node gets Karpenter's disruption taint.
	victim := ""
	for _, p := range poolPods(t, e, ns, "spot")["serving"] {
		if p.Spec.NodeName == cheap {
			victim = p.Name
		}
	}
	taint, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": []corev1.Taint{
		{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule},
		{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}}})
	if _, err := e.Kube.CoreV1().Nodes().Patch(ctx, cheap, types.MergePatchType, taint, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, e, ns, "spot", procLogs(ctl), 90*time.Second, "interrupted pod replaced on on-demand capacity and drained", func() (bool, error) {
		pods := poolPods(t, e, ns, "spot")["serving"]
		var on []string
		for _, p := range pods {
			if p.Name == victim {
				return false, fmt.Errorf("interrupted pod %s still serving", victim)
			}
			on = append(on, p.Name+"@"+p.Spec.NodeName)
			if p.Spec.NodeName != onDemand {
				return false, fmt.Errorf("pod %s on %s, want the on-demand node", p.Name, p.Spec.NodeName)
			}
		}
		return readyCount(pods) == 2, fmt.Errorf("serving %v", on)
	})
}

func costStatus(t *testing.T, e *Env, ns, name string) *nnv1.CostStatus {
	t.Helper()
	out, err := e.KubectlErr("-n", ns, "get", "agentpool/"+name, "-o", "jsonpath={.status.cost}")
	if err != nil || out == "" {
		return nil
	}
	var cs nnv1.CostStatus
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		t.Fatalf("status.cost %q: %v", out, err)
	}
	return &cs
}

func condTrue(cs *nnv1.CostStatus, typ string) bool {
	for _, c := range cs.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
