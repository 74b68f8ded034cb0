package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/scheduler/scoring"
)

// NetworkTopologyName is scoring.NetworkTopology's plugin name (a CustomSchedulerPlugin).
const NetworkTopologyName = scoring.NetworkTopologyName

// newNetworkTopology is NeuroNetesNetworkTopology's factory: scoring.NetworkTopology through
// customPlugin, its levels from the args (scoring.ParseTopologyArgs: strict, defaults when
// absent), its peers from the scheduler's own PodGroup state (gangPeers).
func newNetworkTopology(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	raw, err := argsJSON(obj)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", NetworkTopologyName, err)
	}
	args, err := scoring.ParseTopologyArgs(raw)
	if err != nil {
		return nil, err
	}
	return customPlugin{p: scoring.NetworkTopology{Levels: args.Levels, Peers: gangPeers(h)}}, nil
}

// argsJSON returns a plugin's args as JSON (the framework hands out-of-tree args over as
// runtime.Unknown, JSON or YAML); nil for none.
func argsJSON(obj runtime.Object) ([]byte, error) {
	if obj == nil {
		return nil, nil
	}
	u, ok := obj.(*runtime.Unknown)
	if !ok {
		return nil, fmt.Errorf("want args of type runtime.Unknown, got %T", obj)
	}
	if u.ContentType == runtime.ContentTypeYAML {
		return yaml.YAMLToJSON(u.Raw)
	}
	return u.Raw, nil
}

// gangPeers returns the labels of the nodes that the other pods of a pod's PodGroup
// (spec.schedulingGroup) are assumed or bound on, read from the scheduling cycle's snapshot:
// the PodGroup state's ScheduledPods, which in a pod-group cycle include the pods of the group
// assumed earlier in the same cycle. A pod of no group, or a scheduler without the Workload API
// (GenericWorkload off), has none.
func gangPeers(h fwk.Handle) func(*v1.Pod) []map[string]string {
	return func(pod *v1.Pod) []map[string]string {
		group, ok := scoring.GangName(pod)
		if !ok {
			return nil
		}
		snap := h.SnapshotSharedLister()
		if snap == nil || snap.PodGroupStates() == nil {
			return nil
		}
		st, err := snap.PodGroupStates().Get(pod.Namespace, group)
		if err != nil || st == nil {
			return nil
		}
		var out []map[string]string
		for _, p := range st.ScheduledPods() {
			if p.UID == pod.UID || p.Spec.NodeName == "" {
				continue
			}
			if n, err := snap.NodeInfos().Get(p.Spec.NodeName); err == nil && n.Node() != nil {
				out = append(out, n.Node().Labels)
			}
		}
		return out
	}
}
