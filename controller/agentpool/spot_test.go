package agentpool

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
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
	spec := func(s *nnv1.SpotStrategy) *nnv1.AgentPoolSpec {
		return &nnv1.AgentPoolSpec{Autoscaling: &nnv1.AutoscalingSpec{SpotStrategy: s}}
	}
	for _, tc := range []struct {
		name  string
		spec  *nnv1.AgentPoolSpec
		total int32
		want  spotPlacement
	}{
		{"no autoscaling", &nnv1.AgentPoolSpec{}, 10, spotPlacement{}},
		{"disabled", spec(&nnv1.SpotStrategy{MaxSpotPercent: ptr.To[int32](70)}), 10, spotPlacement{}},
		{"seed 70% of 10", spec(&nnv1.SpotStrategy{Enabled: true, MaxSpotPercent: ptr.To[int32](70)}), 10, spotPlacement{enabled: true, limit: 7}},
		{"rounded down", spec(&nnv1.SpotStrategy{Enabled: true, MaxSpotPercent: ptr.To[int32](70)}), 3, spotPlacement{enabled: true, limit: 2}},
		{"default 100%", spec(&nnv1.SpotStrategy{Enabled: true}), 3, spotPlacement{enabled: true, limit: 3}},
	} {
		if got := resolveSpot(tc.spec, tc.total); got.enabled != tc.want.enabled || got.limit != tc.want.limit {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
