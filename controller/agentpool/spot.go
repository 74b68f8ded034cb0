package agentpool

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// spotNodeLabels are the well-known node labels (key, value) of spot capacity: Karpenter, EKS
// managed node groups, GKE Spot and preemptible VMs, AKS spot node pools.
var spotNodeLabels = [][2]string{
	{"karpenter.sh/capacity-type", "spot"},
	{"eks.amazonaws.com/capacityType", "SPOT"},
	{"cloud.google.com/gke-spot", "true"},
	{"cloud.google.com/gke-preemptible", "true"},
	{"kubernetes.azure.com/scalesetpriority", "spot"},
}

// spotTolerations tolerate the taints that providers put on spot nodes (AKS always; GKE when the
// node pool asks for it).
var spotTolerations = []corev1.Toleration{
	{Key: "kubernetes.azure.com/scalesetpriority", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule},
	{Key: "cloud.google.com/gke-spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule},
}

// Preference weights of spot pods: spot nodes over others, the listed instance types next.
const (
	spotWeight         = 50
	instanceTypeWeight = 20
)

// spotPlacement is a pool's resolved spotStrategy.
type spotPlacement struct {
	enabled bool
	// limit is the most pool pods (serving and warm) that may be spot-eligible.
	limit         int32
	instanceTypes []string
}

// resolveSpot reads spec.autoscaling.spotStrategy for a pool of total pods: floor(maxSpotPercent
// x total / 100) of them may be spot-eligible (maxSpotPercent defaults to 100).
func resolveSpot(spec *nnv1.AgentPoolSpec, total int32) spotPlacement {
	if spec.Autoscaling == nil || spec.Autoscaling.SpotStrategy == nil || !spec.Autoscaling.SpotStrategy.Enabled {
		return spotPlacement{}
	}
	s := spec.Autoscaling.SpotStrategy
	pct := int64(100)
	if s.MaxSpotPercent != nil {
		pct = int64(min(max(*s.MaxSpotPercent, 0), 100))
	}
	return spotPlacement{enabled: true, limit: int32(int64(max(total, 0)) * pct / 100), instanceTypes: s.InstanceTypes}
}

// isSpot reports whether a pod was created spot-eligible.
func isSpot(p *corev1.Pod) bool { return p.Labels[nnv1.CapacityLabel] == nnv1.CapacitySpot }

// applySpot labels pod and sets its placement: a spot pod tolerates spot taints and prefers spot
// nodes (and the listed instance types); an on-demand pod requires a node without any spot label
// value, in every term of its required node affinity.
func applySpot(pod *corev1.Pod, spot bool, instanceTypes []string) {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if spot {
		pod.Labels[nnv1.CapacityLabel] = nnv1.CapacitySpot
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, spotTolerations...)
		for _, l := range spotNodeLabels {
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, corev1.PreferredSchedulingTerm{
				Weight: spotWeight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: l[0], Operator: corev1.NodeSelectorOpIn, Values: []string{l[1]}}}}})
		}
		if len(instanceTypes) > 0 {
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, corev1.PreferredSchedulingTerm{
				Weight: instanceTypeWeight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: append([]string(nil), instanceTypes...)}}}})
		}
		return
	}
	pod.Labels[nnv1.CapacityLabel] = nnv1.CapacityOnDemand
	var notSpot []corev1.NodeSelectorRequirement
	for _, l := range spotNodeLabels {
		notSpot = append(notSpot, corev1.NodeSelectorRequirement{Key: l[0], Operator: corev1.NodeSelectorOpNotIn, Values: []string{l[1]}})
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	req := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(req.NodeSelectorTerms) == 0 {
		req.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	// Terms are ORed: the requirement is ANDed into each of them.
	for i := range req.NodeSelectorTerms {
		req.NodeSelectorTerms[i].MatchExpressions = append(req.NodeSelectorTerms[i].MatchExpressions, notSpot...)
	}
}

// spotDrain keeps the spot-eligible share within limit after a scale-down: when the pods that the
// plan keeps hold more spot pods than limit allows, it drains (or trims) spot pods in place of
// on-demand ones, choosing the least valuable first (not Ready, then newest), as the planner does.
func spotDrain(plan *warmpool.Plan, byName map[string]*corev1.Pod, in []warmpool.Pod, sp spotPlacement) {
	if !sp.enabled {
		return
	}
	leaving := map[string]bool{}
	for _, n := range append(append([]string{}, plan.Drain...), plan.Trim...) {
		leaving[n] = true
	}
	var keptSpot []warmpool.Pod
	for _, p := range in {
		if !p.Terminating && (p.State == warmpool.Serving || p.State == warmpool.Warm) && !leaving[p.Name] && isSpot(byName[p.Name]) {
			keptSpot = append(keptSpot, p)
		}
	}
	excess := int32(len(keptSpot)) - sp.limit
	if excess <= 0 {
		return
	}
	// Least valuable spot pods first: not Ready, then newest.
	sort.SliceStable(keptSpot, func(i, j int) bool {
		a, b := keptSpot[i], keptSpot[j]
		if a.Ready != b.Ready {
			return !a.Ready
		}
		return a.Created.After(b.Created)
	})
	swap := func(list []string, state warmpool.State) {
		for i, n := range list {
			if excess <= 0 || isSpot(byName[n]) {
				continue
			}
			for k, sp := range keptSpot {
				if sp.State == state {
					list[i] = sp.Name
					keptSpot = append(keptSpot[:k], keptSpot[k+1:]...)
					excess--
					break
				}
			}
		}
	}
	swap(plan.Drain, warmpool.Serving)
	swap(plan.Trim, warmpool.Warm)
}

// spotCount counts the live spot-eligible pods that stay after the plan.
func spotCount(byName map[string]*corev1.Pod, leaving map[string]bool) int32 {
	var n int32
	for name, p := range byName {
		if p.DeletionTimestamp.IsZero() && !leaving[name] && podState(p) != warmpool.Draining && isSpot(p) {
			n++
		}
	}
	return n
}
