// Package scoring holds the pure node-scoring functions of NeuroNetes' scheduler profile
// (neuronetes-scheduler, built from hack/tools/scheduler, which wraps them in scheduler-framework
// Score plugins). Nothing here talks to a cluster: callers pass pods, node labels and annotations
// and the counts they read from the scheduler's snapshot.
//
// Every scorer gives a raw score per node and a normalization over the nodes that passed the
// filters, ending in [MinScore, MaxScore] (the framework's 0..100), higher better:
//   - cost: the node's $/hour from the shared price model (controller/cost), cheaper better;
//   - model cache: nodes where the pod's model is warm, then nodes warm for no model, then nodes
//     warm only for other models (their cache is kept for the pods that need it), with the node
//     holding the checkpoint the pod restores from ahead of the others of its warmth
//     (checkpoint.go);
//   - headroom: less load of the pod's pool replicas already on the node, better: each counts 1
//     plus the sessions the gateway pinned to it (headroom.go);
//   - zone spread: fewer of the pod's pool replicas already in the node's zone, better.
package scoring

import (
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
)

// The score bounds of the scheduler framework (framework.MinNodeScore and MaxNodeScore).
const (
	MinScore int64 = 0
	MaxScore int64 = 100
)

// Cache scores: warm for the pod's model, warm for no model, warm for other models only.
const (
	CacheWarm    int64 = MaxScore
	CacheNeutral int64 = MaxScore / 2
	CacheOther   int64 = MinScore
)

// UnknownPrice is CostRaw's result for a node without a price; NormalizeCost gives it MinScore.
const UnknownPrice int64 = -1

// CostRaw is a node's raw cost score: its price in milli-dollars per hour (cost.PriceNode, the
// same model the autoscaler's budgets use), or UnknownPrice. A malformed price annotation is
// ignored as cost.PriceNode does (the table then prices the node).
func CostRaw(labels, annotations map[string]string, table cost.Table) int64 {
	p, _ := cost.PriceNode(labels, annotations, table)
	if !p.Known() {
		return UnknownPrice
	}
	return int64(math.Round(p.PerHour * 1000))
}

// NormalizeCost maps raw prices to scores in place: the cheapest known price gets MaxScore, the
// dearest MinScore, linear between; UnknownPrice gets MinScore; all known prices equal get
// MaxScore.
func NormalizeCost(scores []int64) {
	lo, hi, known := int64(math.MaxInt64), int64(math.MinInt64), false
	for _, s := range scores {
		if s == UnknownPrice {
			continue
		}
		lo, hi, known = min(lo, s), max(hi, s), true
	}
	for i, s := range scores {
		switch {
		case s == UnknownPrice || !known:
			scores[i] = MinScore
		case hi == lo:
			scores[i] = MaxScore
		default:
			scores[i] = MaxScore - (s-lo)*(MaxScore-MinScore)/(hi-lo)
		}
	}
}

// NormalizeLowerBetter maps raw counts to scores in place: the lowest gets MaxScore, the highest
// MinScore, linear between; all equal get MaxScore.
func NormalizeLowerBetter(scores []int64) {
	if len(scores) == 0 {
		return
	}
	lo, hi := scores[0], scores[0]
	for _, s := range scores {
		lo, hi = min(lo, s), max(hi, s)
	}
	for i, s := range scores {
		if hi == lo {
			scores[i] = MaxScore
			continue
		}
		scores[i] = MaxScore - (s-lo)*(MaxScore-MinScore)/(hi-lo)
	}
}

// WarmKeys returns the warm node label keys (nnv1.WarmLabelPrefix) that the pod prefers in its
// node affinity: the controller adds one per AgentClass model (addPreferredNode), so these name
// the pod's model. Nil when the pod names none.
func WarmKeys(pod *corev1.Pod) []string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	var out []string
	for _, t := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		for _, r := range t.Preference.MatchExpressions {
			if strings.HasPrefix(r.Key, nnv1.WarmLabelPrefix) && r.Operator == corev1.NodeSelectorOpIn {
				out = append(out, r.Key)
			}
		}
	}
	return out
}

// CacheScore scores a node by the model caches on it (the node agent's warm labels, value
// "true"): CacheWarm when every one of the pod's warm keys is set on it, else CacheOther when the
// node is warm for some other model, else CacheNeutral. A pod without warm keys scores nodes warm
// for no model CacheNeutral and the others CacheOther, so it leaves caches to pods that use them.
func CacheScore(warmKeys []string, nodeLabels map[string]string) int64 {
	if len(warmKeys) > 0 {
		all := true
		for _, k := range warmKeys {
			all = all && nodeLabels[k] == "true"
		}
		if all {
			return CacheWarm
		}
	}
	for k, v := range nodeLabels {
		if v == "true" && strings.HasPrefix(k, nnv1.WarmLabelPrefix) {
			return CacheOther
		}
	}
	return CacheNeutral
}

// Pool returns the AgentPool a pod belongs to (nnv1.PoolLabel), "" for a pod of no pool.
func Pool(pod *corev1.Pod) string {
	return pod.Labels[nnv1.PoolLabel]
}

// SamePool counts the pods that belong to pool (same namespace, same nnv1.PoolLabel) among pods,
// leaving out those being deleted. Headroom's and zone spread's raw score.
func SamePool(namespace, pool string, pods []*corev1.Pod) int64 {
	if pool == "" {
		return 0
	}
	var n int64
	for _, p := range pods {
		if p.Namespace == namespace && p.Labels[nnv1.PoolLabel] == pool && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// Zone is a node's failure domain: topology.kubernetes.io/zone, "" when unset.
func Zone(nodeLabels map[string]string) string {
	return nodeLabels[corev1.LabelTopologyZone]
}
