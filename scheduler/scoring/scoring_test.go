package scoring

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
)

func TestCostRaw(t *testing.T) {
	table := cost.Table{"p4d.spot": 12, "p4d.on-demand": 32, "g5": 5.5}
	for _, tc := range []struct {
		name        string
		labels, ann map[string]string
		want        int64
	}{
		{"annotation wins", map[string]string{corev1.LabelInstanceTypeStable: "p4d"}, map[string]string{cost.PriceAnnotation: "7.25"}, 7250},
		{"table spot", map[string]string{corev1.LabelInstanceTypeStable: "p4d", "karpenter.sh/capacity-type": "spot"}, nil, 12000},
		{"table on-demand", map[string]string{corev1.LabelInstanceTypeStable: "p4d"}, nil, 32000},
		{"table type only", map[string]string{corev1.LabelInstanceTypeStable: "g5"}, nil, 5500},
		{"malformed annotation falls back to table", map[string]string{corev1.LabelInstanceTypeStable: "g5"}, map[string]string{cost.PriceAnnotation: "cheap"}, 5500},
		{"unpriced", map[string]string{corev1.LabelInstanceTypeStable: "m5"}, nil, UnknownPrice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CostRaw(tc.labels, tc.ann, table); got != tc.want {
				t.Errorf("CostRaw = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fn       func([]int64)
		in, want []int64
	}{
		{"cost linear, cheapest best", NormalizeCost, []int64{12000, 32000, 22000}, []int64{100, 0, 50}},
		{"cost unknown is worst", NormalizeCost, []int64{12000, UnknownPrice, 32000}, []int64{100, 0, 0}},
		{"cost all equal", NormalizeCost, []int64{5, 5}, []int64{100, 100}},
		{"cost all unknown", NormalizeCost, []int64{UnknownPrice, UnknownPrice}, []int64{0, 0}},
		{"cost empty", NormalizeCost, []int64{}, []int64{}},
		{"counts fewest best", NormalizeLowerBetter, []int64{0, 4, 2}, []int64{100, 0, 50}},
		{"counts all equal", NormalizeLowerBetter, []int64{3, 3, 3}, []int64{100, 100, 100}},
		{"counts empty", NormalizeLowerBetter, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.Clone(tc.in)
			tc.fn(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func warmPod(keys ...string) *corev1.Pod {
	p := &corev1.Pod{}
	if len(keys) == 0 {
		return p
	}
	var reqs []corev1.NodeSelectorRequirement
	for _, k := range keys {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}})
	}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
		{Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}}}},
		{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: reqs}},
	}}}
	return p
}

func TestCacheScore(t *testing.T) {
	a, b := nnv1.WarmNodeLabel("sha256:aaaa"), nnv1.WarmNodeLabel("sha256:bbbb")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node map[string]string
		want int64
	}{
		{"warm for the pod's model", warmPod(a), map[string]string{a: "true", b: "true"}, CacheWarm},
		{"cold, no cache", warmPod(a), map[string]string{"zone": "x"}, CacheNeutral},
		{"cold, other model's cache", warmPod(a), map[string]string{b: "true"}, CacheOther},
		{"label not true is not warm", warmPod(a), map[string]string{a: "false"}, CacheNeutral},
		{"two models: both needed", warmPod(a, b), map[string]string{a: "true"}, CacheOther},
		{"no model prefers cacheless nodes", warmPod(), map[string]string{}, CacheNeutral},
		{"no model avoids others' caches", warmPod(), map[string]string{b: "true"}, CacheOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CacheScore(WarmKeys(tc.pod), tc.node); got != tc.want {
				t.Errorf("CacheScore = %d, want %d (keys %v)", got, tc.want, WarmKeys(tc.pod))
			}
		})
	}
}

func TestSamePool(t *testing.T) {
	pod := func(ns, pool string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Labels: map[string]string{nnv1.PoolLabel: pool}}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	pods := []*corev1.Pod{pod("t1", "chat", false), pod("t1", "chat", false), pod("t2", "chat", false), pod("t1", "code", false), pod("t1", "chat", true)}
	for _, tc := range []struct {
		ns, pool string
		want     int64
	}{{"t1", "chat", 2}, {"t2", "chat", 1}, {"t1", "code", 1}, {"t1", "", 0}, {"t3", "chat", 0}} {
		if got := SamePool(tc.ns, tc.pool, pods); got != tc.want {
			t.Errorf("SamePool(%s, %s) = %d, want %d", tc.ns, tc.pool, got, tc.want)
		}
	}
	if Zone(map[string]string{corev1.LabelTopologyZone: "z1"}) != "z1" || Pool(pod("t", "p", false)) != "p" {
		t.Error("Zone/Pool do not read their labels")
	}
}

// TestModelCachePlugin: ModelCache as a CustomSchedulerPlugin admits every node and scores it
// CacheScore of the pod's preferred warm labels.
func TestModelCachePlugin(t *testing.T) {
	key := nnv1.WarmLabelPrefix + "m0"
	pod := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}}}}}}}}
	var p CustomSchedulerPlugin = ModelCache{}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   int64
	}{
		{"warm", map[string]string{key: "true"}, CacheWarm},
		{"unwarmed", nil, CacheNeutral},
		{"other model warm", map[string]string{nnv1.WarmLabelPrefix + "m1": "true"}, CacheOther},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
		if !p.Filter(context.Background(), pod, node) {
			t.Errorf("%s: Filter rejected the node", tc.name)
		}
		if got := p.Score(context.Background(), pod, node); got != tc.want {
			t.Errorf("%s: Score = %d, want %d", tc.name, got, tc.want)
		}
	}
	if p.Name() != ModelCacheName {
		t.Errorf("Name = %q", p.Name())
	}
}
