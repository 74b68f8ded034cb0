package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/neuronetes/neuronetes/controller/cost"
	"github.com/neuronetes/neuronetes/scheduler/scoring"
)

// The plugin names a profile enables (deploy/scheduler/neuronetes-scheduler.yaml).
const (
	CostName       = "NeuroNetesCost"
	ModelCacheName = scoring.ModelCacheName // a scoring.CustomSchedulerPlugin (custom.go)
	HeadroomName   = "NeuroNetesHeadroom"
	ZoneSpreadName = "NeuroNetesZoneSpread"
)

// CostArgs are NeuroNetesCost's pluginConfig args.
type CostArgs struct {
	// PriceTable is the admin's price table in the format of the controller's price-table
	// ConfigMap (cost.ParseTable): "<instance-type>[.spot|.on-demand]": "$/hour". Nodes with the
	// neuronetes.io/price-per-hour annotation are priced by it first.
	PriceTable map[string]string `json:"priceTable,omitempty"`
}

// costPlugin scores nodes by price, cheapest best.
type costPlugin struct{ table cost.Table }

func newCost(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	var args CostArgs
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", CostName, err)
		}
	}
	t, err := cost.ParseTable(args.PriceTable)
	if err != nil {
		return nil, fmt.Errorf("%s args priceTable: %w", CostName, err)
	}
	return &costPlugin{table: t}, nil
}

func (*costPlugin) Name() string { return CostName }

func (c *costPlugin) Score(_ context.Context, _ fwk.CycleState, _ *v1.Pod, n fwk.NodeInfo) (int64, *fwk.Status) {
	node := n.Node()
	return scoring.CostRaw(node.Labels, node.Annotations, c.table), nil
}

func (c *costPlugin) ScoreExtensions() fwk.ScoreExtensions { return c }

func (*costPlugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	normalize(scores, scoring.NormalizeCost)
	return nil
}

// zonePlugin prefers zones with fewer replicas of the pod's pool; PreScore counts them over
// every node of the snapshot, not only the filtered ones.
type zonePlugin struct{ h fwk.Handle }

func newZoneSpread(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return zonePlugin{h: h}, nil
}

const zoneStateKey fwk.StateKey = ZoneSpreadName

type zoneCounts map[string]int64

func (z zoneCounts) Clone() fwk.StateData { return z }

func (zonePlugin) Name() string { return ZoneSpreadName }

func (z zonePlugin) PreScore(_ context.Context, state fwk.CycleState, p *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	pool := scoring.Pool(p)
	if pool == "" {
		return fwk.NewStatus(fwk.Skip)
	}
	all, err := z.h.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: listing nodes: %w", ZoneSpreadName, err))
	}
	counts := zoneCounts{}
	for _, n := range all {
		counts[scoring.Zone(n.Node().Labels)] += scoring.SamePool(p.Namespace, pool, scoring.OutsideGang(p, pods(n)))
	}
	state.Write(zoneStateKey, counts)
	return nil
}

func (zonePlugin) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, n fwk.NodeInfo) (int64, *fwk.Status) {
	d, err := state.Read(zoneStateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s: reading PreScore state: %w", ZoneSpreadName, err))
	}
	return d.(zoneCounts)[scoring.Zone(n.Node().Labels)], nil
}

func (z zonePlugin) ScoreExtensions() fwk.ScoreExtensions { return z }

func (zonePlugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	normalize(scores, scoring.NormalizeLowerBetter)
	return nil
}

func pods(n fwk.NodeInfo) []*v1.Pod {
	infos := n.GetPods()
	out := make([]*v1.Pod, len(infos))
	for i, pi := range infos {
		out[i] = pi.GetPod()
	}
	return out
}

// normalize applies a pure normalization to a framework score list.
func normalize(scores fwk.NodeScoreList, fn func([]int64)) {
	raw := make([]int64, len(scores))
	for i := range scores {
		raw[i] = scores[i].Score
	}
	fn(raw)
	for i := range scores {
		scores[i].Score = raw[i]
	}
}
