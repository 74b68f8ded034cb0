package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/scheduler/scoring"
)

// agentCheckpoints is the AgentCheckpoint resource NeuroNetesModelCache watches.
var agentCheckpoints = nnv1.GroupVersion.WithResource("agentcheckpoints")

// newModelCache is NeuroNetesModelCache's factory: scoring.ModelCache through customPlugin, with
// its Checkpoints read from an AgentCheckpoint informer on the scheduler's kubeconfig (list and
// watch of agentcheckpoints.neuronetes.io in every namespace). Without a kubeconfig (a framework
// built on a bare clientset) it scores warm weights only.
func newModelCache(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	m := scoring.ModelCache{}
	if cfg := h.KubeConfig(); cfg != nil {
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: AgentCheckpoint client: %w", ModelCacheName, err)
		}
		m.Checkpoints, err = checkpointLister(ctx, dynamicinformer.NewDynamicSharedInformerFactory(dc, 0))
		if err != nil {
			return nil, fmt.Errorf("%s: AgentCheckpoint informer: %w", ModelCacheName, err)
		}
	}
	return customPlugin{p: m}, nil
}

// checkpointLister starts f's AgentCheckpoint informer (until ctx ends), storing typed objects,
// and returns a lookup of a namespace's AgentCheckpoints from its cache. Until the cache has
// synced, the lookup returns what it holds (nothing at first): the plugin then scores warm
// weights only.
func checkpointLister(ctx context.Context, f dynamicinformer.DynamicSharedInformerFactory) (func(string) []nnv1.AgentCheckpoint, error) {
	gi := f.ForResource(agentCheckpoints)
	if err := gi.Informer().SetTransform(toAgentCheckpoint); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	idx := gi.Informer().GetIndexer()
	return func(ns string) []nnv1.AgentCheckpoint {
		var out []nnv1.AgentCheckpoint
		_ = cache.ListAllByNamespace(idx, ns, labels.Everything(), func(o any) {
			if ac, ok := o.(*nnv1.AgentCheckpoint); ok {
				out = append(out, *ac)
			}
		})
		return out
	}, nil
}

// toAgentCheckpoint converts the informer's unstructured objects to *nnv1.AgentCheckpoint once,
// as they enter its cache; anything else (a deletion tombstone) passes unchanged. An object that
// does not convert is kept with its name only (no status, so it names no node) rather than failing
// the watch.
func toAgentCheckpoint(o any) (any, error) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return o, nil
	}
	var ac nnv1.AgentCheckpoint
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ac); err != nil {
		ac = nnv1.AgentCheckpoint{}
		ac.Namespace, ac.Name, ac.ResourceVersion = u.GetNamespace(), u.GetName(), u.GetResourceVersion()
	}
	return &ac, nil
}
