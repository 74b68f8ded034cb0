package agentpool

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
)

// TestSpotPlacement: with spotStrategy at 50%, half of the pool's pods (rounded down) are
// spot-eligible (spot tolerations, preferences for the spot labels and instance types) and the
// others require non-spot nodes, ANDed into the template's own required affinity; after a
// scale-down the kept pods stay within the share.
func TestSpotPlacement(t *testing.T) {
	class := testClass(nil)
	class.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpExists}}}}}}}
	pool := testPool(4) // 4 serving + 2 warm
	pool.Spec.Autoscaling.SpotStrategy = &nnv1.SpotStrategy{Enabled: true, MaxSpotPercent: ptr.To[int32](50), InstanceTypes: []string{"g5.12xlarge"}}
	h := newHarness(t, class, pool)
	h.reconcile()
	h.pods()
	spot, onDemand := h.capacity()
	if len(spot) != 3 || len(onDemand) != 3 {
		t.Fatalf("6 pods at 50%%: %d spot, %d on-demand, want 3 and 3", len(spot), len(onDemand))
	}
	for _, p := range spot {
		if len(p.Spec.Tolerations) != len(spotTolerations) {
			t.Errorf("spot pod %s tolerations %v", p.Name, p.Spec.Tolerations)
		}
		pref := p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		if len(pref) != len(spotNodeLabels)+1 || pref[len(pref)-1].Preference.MatchExpressions[0].Values[0] != "g5.12xlarge" {
			t.Errorf("spot pod %s preferences %+v", p.Name, pref)
		}
	}
	for _, p := range onDemand {
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchExpressions) != 1+len(spotNodeLabels) || terms[0].MatchExpressions[0].Key != "gpu" ||
			terms[0].MatchExpressions[1].Operator != corev1.NodeSelectorOpNotIn {
			t.Errorf("on-demand pod %s required terms %+v", p.Name, terms)
		}
		if len(p.Spec.Tolerations) != 0 {
			t.Errorf("on-demand pod %s tolerates spot: %v", p.Name, p.Spec.Tolerations)
		}
	}
	// Scale down to 3 serving (5 pods, at most 2 spot): the planner alone would drain the
	// on-demand serving pod and keep 3 spot pods.
	pl := h.pool()
	pl.Spec.Replicas = ptr.To[int32](3)
	if err := h.c.Update(context.Background(), pl); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	h.pods()
	if spot, onDemand = h.capacity(); len(spot) > 2 || len(spot)+len(onDemand) != 5 {
		t.Fatalf("after the scale-down to 5 pods: %d spot, %d on-demand, want at most 2 spot of 5", len(spot), len(onDemand))
	}
}

// capacity returns the live pool pods by capacity label.
func (h *harness) capacity() (spot, onDemand []corev1.Pod) {
	var l corev1.PodList
	if err := h.c.List(context.Background(), &l, client.InNamespace("ns")); err != nil {
		h.t.Fatal(err)
	}
	for _, p := range l.Items {
		if !p.DeletionTimestamp.IsZero() || podState(&p) == "draining" {
			continue
		}
		switch p.Labels[nnv1.CapacityLabel] {
		case nnv1.CapacitySpot:
			spot = append(spot, p)
		case nnv1.CapacityOnDemand:
			onDemand = append(onDemand, p)
		}
	}
	return spot, onDemand
}

func TestResolveSpot(t *testing.T) {
	pool := func(s *nnv1.SpotStrategy, c *nnv1.CostConstraints, st *nnv1.CostStatus) *nnv1.AgentPool {
		return &nnv1.AgentPool{Spec: nnv1.AgentPoolSpec{Autoscaling: &nnv1.AutoscalingSpec{SpotStrategy: s, CostConstraints: c}},
			Status: nnv1.AgentPoolStatus{Cost: st}}
	}
	enableSpot := &nnv1.CostConstraints{OnBudgetExceeded: []nnv1.BudgetAction{nnv1.BudgetEnableSpot}}
	preferCapped := &nnv1.CostConstraints{Optimization: &nnv1.CostOptimization{PreferSpot: true, SpotMaxPrice: "5.0"}}
	for _, tc := range []struct {
		name   string
		pool   *nnv1.AgentPool
		total  int32
		want   spotPlacement
		capped bool
	}{
		{"no autoscaling", &nnv1.AgentPool{}, 10, spotPlacement{}, false},
		{"disabled", pool(&nnv1.SpotStrategy{MaxSpotPercent: ptr.To[int32](70)}, nil, nil), 10, spotPlacement{}, false},
		{"seed 70% of 10", pool(&nnv1.SpotStrategy{Enabled: true, MaxSpotPercent: ptr.To[int32](70)}, nil, nil), 10, spotPlacement{enabled: true, limit: 7}, false},
		{"rounded down", pool(&nnv1.SpotStrategy{Enabled: true, MaxSpotPercent: ptr.To[int32](70)}, nil, nil), 3, spotPlacement{enabled: true, limit: 2}, false},
		{"default 100%", pool(&nnv1.SpotStrategy{Enabled: true}, nil, nil), 3, spotPlacement{enabled: true, limit: 3}, false},
		{"preferSpot turns spot on, capped", pool(nil, preferCapped, nil), 4, spotPlacement{enabled: true, limit: 4}, true},
		{"preferSpot without a cap", pool(nil, &nnv1.CostConstraints{Optimization: &nnv1.CostOptimization{PreferSpot: true}}, nil), 4, spotPlacement{enabled: true, limit: 4}, false},
		{"spotMaxPrice without preferSpot does nothing", pool(nil, &nnv1.CostConstraints{Optimization: &nnv1.CostOptimization{SpotMaxPrice: "5"}}, nil), 4, spotPlacement{}, false},
		{"enable-spot in force: status share", pool(&nnv1.SpotStrategy{MaxSpotPercent: ptr.To[int32](50)}, enableSpot, &nnv1.CostStatus{SpotPercent: ptr.To[int32](50)}), 4, spotPlacement{enabled: true, limit: 2}, false},
		{"stale share without enable-spot in the spec", pool(nil, &nnv1.CostConstraints{}, &nnv1.CostStatus{SpotPercent: ptr.To[int32](50)}), 4, spotPlacement{}, false},
		{"enable-spot cleared", pool(&nnv1.SpotStrategy{MaxSpotPercent: ptr.To[int32](50)}, nil, &nnv1.CostStatus{}), 4, spotPlacement{}, false},
	} {
		if got := resolveSpot(tc.pool, tc.total, cost.SpotCap{}); got.enabled != tc.want.enabled || got.limit != tc.want.limit || got.capped != tc.capped {
			t.Errorf("%s: %+v, want %+v capped %v", tc.name, got, tc.want, tc.capped)
		}
	}
}

func TestPickInstanceTypeSpreads(t *testing.T) {
	types := []string{"g4dn.12xlarge", "g5.12xlarge", "p3.8xlarge"}
	counts := map[string]int{"g5.12xlarge": 1}
	var got []string
	for range 5 {
		p := pickInstanceType(types, counts)
		counts[p]++
		got = append(got, p)
	}
	want := []string{"g4dn.12xlarge", "p3.8xlarge", "g4dn.12xlarge", "g5.12xlarge", "p3.8xlarge"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picks %v, want %v", got, want)
		}
	}
	if pickInstanceType(nil, counts) != "" {
		t.Fatal("a pick without types")
	}
}

// TestSpotPreferencesCap: with preferSpot and spotMaxPrice, a spot pod prefers only spot capacity
// at or under the cap; a spot node above it is not preferred by any term.
func TestSpotPreferencesCap(t *testing.T) {
	sp := spotPlacement{enabled: true, capped: true, instanceTypes: []string{"g5.12xlarge", "p3.8xlarge"},
		prices: cost.SpotCap{Cheap: []string{"n-cheap"}, Dear: []string{"n-dear"}, CheapTypes: []string{"g5.12xlarge"}}}
	node := func(name, typ string) map[string]string {
		return map[string]string{corev1.LabelHostname: name, corev1.LabelInstanceTypeStable: typ, "karpenter.sh/capacity-type": "spot"}
	}
	terms := spotPreferences(sp, "g5.12xlarge")
	score := func(labels map[string]string) int32 {
		var s int32
		for _, t := range terms {
			if matches(t.Preference, labels) {
				s += t.Weight
			}
		}
		return s
	}
	cheap, dear, future := score(node("n-cheap", "p3.8xlarge")), score(node("n-dear", "g5.12xlarge")), score(node("n-new", "g5.12xlarge"))
	if cheap < spotWeight || future < spotWeight {
		t.Errorf("cheap node score %d, new node of a cheap type %d: want both >= %d", cheap, future, spotWeight)
	}
	if dear >= spotWeight {
		t.Errorf("a spot node above the cap scores %d, want < %d (not preferred as spot)", dear, spotWeight)
	}
	if uncapped := spotPreferences(spotPlacement{enabled: true}, ""); len(uncapped) != len(spotNodeLabels) {
		t.Errorf("uncapped preferences %+v", uncapped)
	}
	if none := spotPreferences(spotPlacement{enabled: true, capped: true}, ""); len(none) != 0 {
		t.Errorf("nothing under the cap, yet preferences %+v", none)
	}
}

// matches evaluates a node selector term with In/NotIn over labels (what spotPreferences uses).
func matches(term corev1.NodeSelectorTerm, labels map[string]string) bool {
	for _, r := range term.MatchExpressions {
		v, has := labels[r.Key]
		in := false
		for _, x := range r.Values {
			in = in || (has && v == x)
		}
		if (r.Operator == corev1.NodeSelectorOpIn && !in) || (r.Operator == corev1.NodeSelectorOpNotIn && in) {
			return false
		}
	}
	return true
}

// TestSpotPlacementDiversifiesAndCaps: the seed's instanceTypes spread the spot pods evenly, and
// with preferSpot + spotMaxPrice the pods prefer the spot node priced under the cap (from the
// cluster's nodes through the price model) and not the one above it.
func TestSpotPlacementDiversifiesAndCaps(t *testing.T) {
	class := testClass(nil)
	pool := testPool(4) // 4 serving + 2 warm
	pool.Spec.Autoscaling.SpotStrategy = &nnv1.SpotStrategy{Enabled: true, InstanceTypes: []string{"g4dn.12xlarge", "g5.12xlarge", "p3.8xlarge"}}
	pool.Spec.Autoscaling.CostConstraints = &nnv1.CostConstraints{Optimization: &nnv1.CostOptimization{PreferSpot: true, SpotMaxPrice: "5.0"}}
	cheap := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-cheap", Labels: map[string]string{"karpenter.sh/capacity-type": "spot"},
		Annotations: map[string]string{cost.PriceAnnotation: "3.2"}}}
	dear := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-dear", Labels: map[string]string{"karpenter.sh/capacity-type": "spot"},
		Annotations: map[string]string{cost.PriceAnnotation: "9"}}}
	h := newHarness(t, class, pool, cheap, dear)
	h.r.Prices = cost.KubePrices{Nodes: h.c}
	h.reconcile()
	h.pods()
	spot, onDemand := h.capacity()
	if len(spot) != 6 || len(onDemand) != 0 {
		t.Fatalf("%d spot, %d on-demand, want 6 spot", len(spot), len(onDemand))
	}
	perType := map[string]int{}
	for _, p := range spot {
		perType[p.Annotations[SpotInstanceTypeAnnotation]]++
		pref := p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		if len(pref) == 0 || pref[0].Preference.MatchExpressions[0].Key != corev1.LabelHostname ||
			len(pref[0].Preference.MatchExpressions[0].Values) != 1 || pref[0].Preference.MatchExpressions[0].Values[0] != "spot-cheap" {
			t.Fatalf("pod %s does not prefer exactly the cheap spot node: %+v", p.Name, pref)
		}
	}
	if perType["g4dn.12xlarge"] != 2 || perType["g5.12xlarge"] != 2 || perType["p3.8xlarge"] != 2 {
		t.Fatalf("spot pods per instance type %v, want 2 each", perType)
	}
}

func TestSpotShareChangedPredicate(t *testing.T) {
	withShare := func(p *int32) *nnv1.AgentPool {
		pool := &nnv1.AgentPool{}
		if p != nil {
			pool.Status.Cost = &nnv1.CostStatus{SpotPercent: p}
		}
		return pool
	}
	for _, tc := range []struct {
		name     string
		old, new *nnv1.AgentPool
		want     bool
	}{
		{"enable-spot fires", withShare(nil), withShare(ptr.To[int32](70)), true},
		{"enable-spot clears", withShare(ptr.To[int32](70)), withShare(nil), true},
		{"share unchanged", withShare(ptr.To[int32](70)), withShare(ptr.To[int32](70)), false},
		{"no cost status", withShare(nil), withShare(nil), false},
	} {
		if got := spotShareChanged.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
