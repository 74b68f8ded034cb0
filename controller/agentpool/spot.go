package agentpool

import (
	"context"
	"slices"
	"sort"

	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
	"github.com/neuronetes/neuronetes/warmpool"
)

// spotNodeLabels are the well-known node labels of spot capacity (one list: the price model's).
var spotNodeLabels = cost.SpotNodeLabels

// spotTolerations tolerate the taints that providers put on spot nodes (AKS always; GKE when the
// node pool asks for it).
var spotTolerations = []corev1.Toleration{
	{Key: "kubernetes.azure.com/scalesetpriority", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule},
	{Key: "cloud.google.com/gke-spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule},
}

// Preference weights of spot pods: spot nodes (under the price cap) over others, the pod's own
// instance type next, the pool's other listed types last.
const (
	spotWeight         = 50
	instanceTypeWeight = 20
	otherTypeWeight    = 5
)

// SpotInstanceTypeAnnotation on a spot pod names the spotStrategy.instanceTypes entry it prefers
// most; the reconciler spreads the pool's spot pods evenly over the listed types by it.
const SpotInstanceTypeAnnotation = "neuronetes.io/spot-instance-type"

// spotPlacement is a pool's resolved spot placement.
type spotPlacement struct {
	enabled bool
	// limit is the most pool pods (serving and warm) that may be spot-eligible.
	limit         int32
	instanceTypes []string
	// capped: optimization.preferSpot with spotMaxPrice; prices then says which spot nodes and
	// types are at or under the cap, and only those are preferred.
	capped bool
	prices cost.SpotCap
}

// spotPercent returns the spot share a pool may use now and whether spot placement is on: with
// spotStrategy.enabled or optimization.preferSpot, maxSpotPercent (default
// nnv1.DefaultMaxSpotPercent); else, while the budget action enable-spot is in force, the share
// the autoscaler published in status.cost.spotPercent.
func spotPercent(pool *nnv1.AgentPool) (int32, bool) {
	as := pool.Spec.Autoscaling
	if as == nil {
		return 0, false
	}
	pct := nnv1.DefaultMaxSpotPercent
	if as.SpotStrategy != nil && as.SpotStrategy.MaxSpotPercent != nil {
		pct = min(max(*as.SpotStrategy.MaxSpotPercent, 0), 100)
	}
	if (as.SpotStrategy != nil && as.SpotStrategy.Enabled) || preferSpot(pool) {
		return pct, true
	}
	if c := pool.Status.Cost; c != nil && c.SpotPercent != nil && listsEnableSpot(as.CostConstraints) {
		return min(max(*c.SpotPercent, 0), 100), true
	}
	return 0, false
}

// listsEnableSpot reports whether onBudgetExceeded lists enable-spot: a status.cost.spotPercent
// left from a spec that listed it is ignored.
func listsEnableSpot(c *nnv1.CostConstraints) bool {
	return c != nil && slices.Contains(c.OnBudgetExceeded, nnv1.BudgetEnableSpot)
}

func preferSpot(pool *nnv1.AgentPool) bool {
	c := pool.Spec.Autoscaling.CostConstraints
	return c != nil && c.Optimization != nil && c.Optimization.PreferSpot
}

// spotMaxPrice returns optimization.spotMaxPrice when preferSpot is on and the cap is set (> 0).
func spotMaxPrice(pool *nnv1.AgentPool) (float64, bool) {
	if pool.Spec.Autoscaling == nil || !preferSpot(pool) {
		return 0, false
	}
	v, err := pool.Spec.Autoscaling.CostConstraints.Optimization.SpotMaxPrice.Float64()
	if err != nil || v <= 0 {
		return 0, false
	}
	return v, true
}

// resolveSpot resolves the pool's spot placement for total pods: floor(spotPercent x total / 100)
// of them may be spot-eligible. prices is the price model's split of the cluster's spot capacity
// by spotMaxPrice (used only when the cap applies).
func resolveSpot(pool *nnv1.AgentPool, total int32, prices cost.SpotCap) spotPlacement {
	pct, ok := spotPercent(pool)
	if !ok {
		return spotPlacement{}
	}
	sp := spotPlacement{enabled: true, limit: int32(int64(max(total, 0)) * int64(pct) / 100)}
	if s := pool.Spec.Autoscaling.SpotStrategy; s != nil {
		sp.instanceTypes = s.InstanceTypes
	}
	if _, capped := spotMaxPrice(pool); capped {
		sp.capped, sp.prices = true, prices
	}
	return sp
}

// pickInstanceType returns the listed type the fewest live spot pods prefer (the first such in
// list order), so spot replicas spread over spotStrategy.instanceTypes; "" when none is listed.
func pickInstanceType(types []string, counts map[string]int) string {
	best := ""
	for _, t := range types {
		if best == "" || counts[t] < counts[best] {
			best = t
		}
	}
	return best
}

// isSpot reports whether a pod was created spot-eligible.
func isSpot(p *corev1.Pod) bool { return p.Labels[nnv1.CapacityLabel] == nnv1.CapacitySpot }

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: append([]string(nil), values...)}
}

func prefer(weight int32, reqs ...corev1.NodeSelectorRequirement) corev1.PreferredSchedulingTerm {
	return corev1.PreferredSchedulingTerm{Weight: weight, Preference: corev1.NodeSelectorTerm{MatchExpressions: reqs}}
}

// spotPreferences are a spot pod's preferred node terms. Uncapped, every spot node is preferred
// (one term per well-known spot label). Capped, only spot capacity at or under spotMaxPrice:
// the named cheap nodes, and nodes of the cheap spot instance types that are not among the dear
// nodes (an annotation may price one node of a cheap type above the cap). Then the pod's own
// instance type (picked), then the pool's other listed types.
func spotPreferences(sp spotPlacement, picked string) []corev1.PreferredSchedulingTerm {
	var out []corev1.PreferredSchedulingTerm
	switch {
	case !sp.capped:
		for _, l := range spotNodeLabels {
			out = append(out, prefer(spotWeight, req(l[0], corev1.NodeSelectorOpIn, l[1])))
		}
	default:
		if len(sp.prices.Cheap) > 0 {
			out = append(out, prefer(spotWeight, req(corev1.LabelHostname, corev1.NodeSelectorOpIn, sp.prices.Cheap...)))
		}
		if len(sp.prices.CheapTypes) > 0 {
			for _, l := range spotNodeLabels {
				rs := []corev1.NodeSelectorRequirement{req(l[0], corev1.NodeSelectorOpIn, l[1]), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, sp.prices.CheapTypes...)}
				if len(sp.prices.Dear) > 0 {
					rs = append(rs, req(corev1.LabelHostname, corev1.NodeSelectorOpNotIn, sp.prices.Dear...))
				}
				out = append(out, prefer(spotWeight, rs...))
			}
		}
	}
	if picked != "" {
		out = append(out, prefer(instanceTypeWeight, req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, picked)))
	}
	var others []string
	for _, t := range sp.instanceTypes {
		if t != picked {
			others = append(others, t)
		}
	}
	if len(others) > 0 {
		out = append(out, prefer(otherTypeWeight, req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, others...)))
	}
	return out
}

// applySpot labels pod and sets its placement: a spot pod tolerates spot taints and prefers spot
// nodes (spotPreferences; picked is its instance type, recorded in SpotInstanceTypeAnnotation);
// an on-demand pod requires a node without any spot label value, in every term of its required
// node affinity.
func applySpot(pod *corev1.Pod, spot bool, sp spotPlacement, picked string) {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if spot {
		pod.Labels[nnv1.CapacityLabel] = nnv1.CapacitySpot
		if picked != "" {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[SpotInstanceTypeAnnotation] = picked
		}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, spotTolerations...)
		na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, spotPreferences(sp, picked)...)
		return
	}
	requireOnDemand(pod)
}

// requireOnDemand labels pod on-demand and ANDs "no spot label" into every term of its required
// node affinity.
func requireOnDemand(pod *corev1.Pod) {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	pod.Labels[nnv1.CapacityLabel] = nnv1.CapacityOnDemand
	var notSpot []corev1.NodeSelectorRequirement
	for _, l := range spotNodeLabels {
		notSpot = append(notSpot, req(l[0], corev1.NodeSelectorOpNotIn, l[1]))
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	rq := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(rq.NodeSelectorTerms) == 0 {
		rq.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	// Terms are ORed: the requirement is ANDed into each of them.
	for i := range rq.NodeSelectorTerms {
		rq.NodeSelectorTerms[i].MatchExpressions = append(rq.NodeSelectorTerms[i].MatchExpressions, notSpot...)
	}
}

// spotTypeCounts counts the live spot pods per preferred instance type.
func spotTypeCounts(byName map[string]*corev1.Pod) map[string]int {
	out := map[string]int{}
	for _, p := range byName {
		if p.DeletionTimestamp.IsZero() && podState(p) != warmpool.Draining && isSpot(p) {
			if t := p.Annotations[SpotInstanceTypeAnnotation]; t != "" {
				out[t]++
			}
		}
	}
	return out
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

// SpotQuoter lists the cluster's nodes with their prices and the price table (cost.KubePrices).
type SpotQuoter interface {
	Quotes(ctx context.Context) ([]cost.NodeQuote, cost.Table, error)
}

// spotPrices splits the cluster's spot capacity by the pool's spotMaxPrice (zero when the cap
// does not apply or the quotes fail: then no spot node is preferred, which errs on the cheap side).
func (r *Reconciler) spotPrices(ctx context.Context, pool *nnv1.AgentPool) cost.SpotCap {
	capPrice, ok := spotMaxPrice(pool)
	if !ok || r.Prices == nil {
		return cost.SpotCap{}
	}
	quotes, table, err := r.Prices.Quotes(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Pricing spot nodes failed: no spot node is preferred")
		return cost.SpotCap{}
	}
	return cost.SplitSpot(quotes, table, capPrice)
}
