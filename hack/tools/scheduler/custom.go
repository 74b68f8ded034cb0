package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/neuronetes/neuronetes/scheduler/scoring"
)

// customPlugin runs a scoring.CustomSchedulerPlugin (seed 000's extension point) as a framework
// Filter and Score plugin.
type customPlugin struct{ p scoring.CustomSchedulerPlugin }

// newCustom is the framework factory of p's adapter.
func newCustom(p scoring.CustomSchedulerPlugin) frameworkruntime.PluginFactory {
	return func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
		return customPlugin{p: p}, nil
	}
}

func (c customPlugin) Name() string { return c.p.Name() }

func (c customPlugin) Filter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, n fwk.NodeInfo) *fwk.Status {
	node := n.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	if !c.p.Filter(ctx, pod, node) {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node(s) rejected by %s", c.p.Name()))
	}
	return nil
}

func (c customPlugin) Score(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, n fwk.NodeInfo) (int64, *fwk.Status) {
	return min(max(c.p.Score(ctx, pod, n.Node()), scoring.MinScore), scoring.MaxScore), nil
}

func (customPlugin) ScoreExtensions() fwk.ScoreExtensions { return nil }
