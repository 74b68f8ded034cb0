package scaleloop

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
)

func pricedNode(name string, labels, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann}}
}

func podOn(name, node, state string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{v1alpha1.PoolLabel: "pool", v1alpha1.StateLabel: state}},
		Spec: corev1.PodSpec{NodeName: node}}
}

// TestLoopBudgetActions runs the seed's budget-pool through the loop with nodes priced by an
// annotation and by the price table: the spend is charged in dollars from the node prices, the
// fallback fires for new sessions past costThreshold, every action fires in order once the budget
// is spent (Events and status.cost conditions), and everything clears at UTC midnight and again
// when the budget is raised.
func TestLoopBudgetActions(t *testing.T) {
	pool := &v1alpha1.AgentPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", Generation: 1},
		Spec: v1alpha1.AgentPoolSpec{Replicas: i32p(3), MinReplicas: i32p(1), MaxReplicas: i32p(6),
			Autoscaling: &v1alpha1.AutoscalingSpec{
				Metrics: []v1alpha1.MetricSpec{{Type: v1alpha1.MetricConcurrentSessions, Target: "8"}},
				CostConstraints: &v1alpha1.CostConstraints{DailyBudget: "20",
					OnBudgetExceeded: []v1alpha1.BudgetAction{v1alpha1.BudgetScaleToMin, v1alpha1.BudgetUseFallbackModel, v1alpha1.BudgetEnableSpot},
					FallbackPoolRef:  &v1alpha1.LocalObjectReference{Name: "small"},
					Optimization:     &v1alpha1.CostOptimization{DynamicModelSelection: &v1alpha1.DynamicModelSelection{Enabled: true, CostThreshold: "0.5"}}},
				SpotStrategy: &v1alpha1.SpotStrategy{MaxSpotPercent: i32p(70)}}},
	}
	table := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "prices", Namespace: "sys"}, Data: map[string]string{"g5.12xlarge.on-demand": "6"}}
	c, w, rec := newEnv(t, pool, table,
		pricedNode("a", map[string]string{"karpenter.sh/capacity-type": "spot"}, map[string]string{cost.PriceAnnotation: "4"}),
		pricedNode("b", map[string]string{"karpenter.sh/capacity-type": "on-demand", corev1.LabelInstanceTypeStable: "g5.12xlarge"}, nil),
		podOn("p1", "a", v1alpha1.PodStateServing), podOn("p2", "b", v1alpha1.PodStateServing), podOn("p3", "b", v1alpha1.PodStateWarm))
	now := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	l := &Loop{Client: c, Writer: w, Recorder: rec, Now: func() time.Time { return now },
		Prices: cost.KubePrices{Nodes: c, Table: types.NamespacedName{Namespace: "sys", Name: "prices"}}}
	key := types.NamespacedName{Namespace: "ns", Name: "pool"}
	step := func(d time.Duration) *v1alpha1.CostStatus {
		t.Helper()
		now = now.Add(d)
		if _, err := l.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var p v1alpha1.AgentPool
		if err := c.Get(context.Background(), key, &p); err != nil {
			t.Fatal(err)
		}
		if p.Status.Cost == nil {
			t.Fatal("no status.cost")
		}
		return p.Status.Cost
	}
	isTrue := func(cs *v1alpha1.CostStatus, typ string) bool { return meta.IsStatusConditionTrue(cs.Conditions, typ) }

	cs := step(0)
	if cs.PricePerHour != "10" || isTrue(cs, v1alpha1.CostBudgetExceeded) || cs.Fallback != nil {
		t.Fatalf("start: %+v (want $10/h: $4 node a, $6 node b shared by two pods)", cs)
	}
	events(rec)
	cs = step(61 * time.Minute) // $10.17 spent: past half the budget
	if cs.Fallback == nil || cs.Fallback.Scope != v1alpha1.FallbackNewSessions || cs.Fallback.PoolRef.Name != "small" || isTrue(cs, v1alpha1.CostBudgetExceeded) {
		t.Fatalf("past costThreshold: %+v", cs)
	}
	if ev := events(rec); !strings.Contains(ev, "Warning CostActionFired FallbackActive") {
		t.Fatalf("events %q", ev)
	}
	cs = step(time.Hour) // $20.17: exceeded
	if got := cs.ActiveActions; len(got) != 3 || got[0] != v1alpha1.BudgetScaleToMin || got[2] != v1alpha1.BudgetEnableSpot {
		t.Fatalf("active actions %v", got)
	}
	if cs.Fallback == nil || cs.Fallback.Scope != v1alpha1.FallbackAllSessions || cs.SpotPercent == nil || *cs.SpotPercent != 70 ||
		!isTrue(cs, v1alpha1.CostScaledToMin) || !isTrue(cs, v1alpha1.CostSpotEnabled) {
		t.Fatalf("exceeded: %+v", cs)
	}
	ev := events(rec)
	for _, want := range []string{"CostActionFired BudgetExceeded", "CostActionFired ScaledToMin", "CostActionFired SpotEnabled"} {
		if !strings.Contains(ev, want) {
			t.Fatalf("events %q lack %q", ev, want)
		}
	}
	if i, j := strings.Index(ev, "ScaledToMin"), strings.Index(ev, "SpotEnabled"); i > j {
		t.Fatalf("events out of spec order: %q", ev)
	}
	if got := specReplicas(t, c, key); got != 1 {
		t.Fatalf("scale-to-min: replicas %d", got)
	}
	cs = step(time.Hour) // 00:01 the next day
	if len(cs.ActiveActions) != 0 || cs.Fallback != nil || cs.SpotPercent != nil || isTrue(cs, v1alpha1.CostBudgetExceeded) {
		t.Fatalf("next day: %+v", cs)
	}
	if ev := events(rec); !strings.Contains(ev, "Normal CostActionCleared BudgetExceeded") || !strings.Contains(ev, "Normal CostActionCleared FallbackActive") {
		t.Fatalf("next day events %q", ev)
	}

	// Spend the new day's budget, then raise it.
	cs = step(3 * time.Hour)
	if !isTrue(cs, v1alpha1.CostBudgetExceeded) {
		t.Fatalf("second day: %+v", cs)
	}
	var p v1alpha1.AgentPool
	if err := c.Get(context.Background(), key, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Autoscaling.CostConstraints.DailyBudget = "1000"
	p.Generation++
	if err := c.Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	events(rec)
	cs = step(time.Minute)
	if isTrue(cs, v1alpha1.CostBudgetExceeded) || cs.Fallback != nil {
		t.Fatalf("budget raised: %+v", cs)
	}
	if ev := events(rec); !strings.Contains(ev, "CostActionCleared BudgetExceeded") {
		t.Fatalf("budget raised events %q", ev)
	}

	// costConstraints removed: status.cost goes with it.
	if err := c.Get(context.Background(), key, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Autoscaling.CostConstraints = nil
	p.Generation++
	if err := c.Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if _, err := l.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), key, &p); err != nil {
		t.Fatal(err)
	}
	if p.Status.Cost != nil {
		t.Fatalf("status.cost kept after costConstraints were removed: %+v", p.Status.Cost)
	}
}
