package scoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// NetworkTopologyName is NetworkTopology's plugin name.
const NetworkTopologyName = "NeuroNetesNetworkTopology"

// TopologyNeutral is NetworkTopology's score on every node when the pod has no placed gang peer
// (a single replica, or the first pod of a gang): it prefers no node.
const TopologyNeutral = MaxScore / 2

// DefaultTopologyLevels are the node label keys NetworkTopology reads when its args name none,
// outermost first. They are the hierarchies users meet elsewhere: Kueue's Topology Aware
// Scheduling documentation (block, rack), GKE's (block, sub-block, host), EKS's (network node
// layers 1-3, layer 1 the farthest from the instance), then the node itself. A node carries one
// provider's labels; a level that neither of two nodes carries is skipped (Closeness), so the
// families do not interfere.
var DefaultTopologyLevels = []string{
	"cloud.provider.com/topology-block",
	"cloud.provider.com/topology-rack",
	"cloud.google.com/gce-topology-block",
	"cloud.google.com/gce-topology-subblock",
	"cloud.google.com/gce-topology-host",
	"topology.k8s.aws/network-node-layer-1",
	"topology.k8s.aws/network-node-layer-2",
	"topology.k8s.aws/network-node-layer-3",
	corev1.LabelHostname,
}

// TopologyArgs are NeuroNetesNetworkTopology's pluginConfig args.
type TopologyArgs struct {
	// Levels are the node label keys of the network hierarchy, outermost first (e.g. block, then
	// rack, then kubernetes.io/hostname). Empty: DefaultTopologyLevels.
	Levels []string `json:"levels,omitempty"`
}

// ParseTopologyArgs decodes NeuroNetesNetworkTopology's args (JSON; nil or empty: the defaults)
// strictly: an unknown field, an empty, malformed or repeated label key is an error naming it.
func ParseTopologyArgs(raw []byte) (TopologyArgs, error) {
	var a TopologyArgs
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return a, fmt.Errorf("%s args: %w", NetworkTopologyName, err)
		}
	}
	if a.Levels == nil {
		a.Levels = append([]string(nil), DefaultTopologyLevels...)
		return a, nil
	}
	if len(a.Levels) == 0 {
		return a, fmt.Errorf("%s args levels: empty list: name at least one node label key, or leave levels out for the defaults", NetworkTopologyName)
	}
	seen := map[string]bool{}
	for i, k := range a.Levels {
		switch {
		case k == "":
			return a, fmt.Errorf("%s args levels[%d]: empty label key", NetworkTopologyName, i)
		case seen[k]:
			return a, fmt.Errorf("%s args levels[%d]: %q is listed twice", NetworkTopologyName, i, k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return a, fmt.Errorf("%s args levels[%d]: %q is not a label key: %s", NetworkTopologyName, i, k, strings.Join(errs, "; "))
		}
		seen[k] = true
	}
	return a, nil
}

// Closeness compares two nodes' places in the hierarchy levels (outermost first): shared counts
// the levels, from the outermost, where both nodes carry the label with one value, stopping at the
// first level where their values differ or only one of them carries it; a level neither carries is
// skipped. Of counts the levels b carries. Domains are hierarchical: a rack value counts only under
// a shared block, so rack names need not be unique across blocks.
func Closeness(levels []string, a, b map[string]string) (shared, of int) {
	matching := true
	for _, k := range levels {
		va, okA := a[k]
		vb, okB := b[k]
		if okB {
			of++
		}
		if !okA && !okB {
			continue
		}
		if matching && okA && okB && va == vb {
			shared++
			continue
		}
		matching = false
	}
	return shared, of
}

// TopologyScore scores a node for a pod whose gang peers (its PodGroup's other pods already placed
// or assumed) run on nodes labelled peers: the mean, over the peers whose node carries at least
// one level, of MaxScore × shared / of (Closeness of the node to the peer's node). So a node in the
// peers' innermost domain (their node) scores MaxScore, one in their rack more than one only in
// their block, and one sharing nothing MinScore. Without such a peer it is TopologyNeutral.
func TopologyScore(levels []string, node map[string]string, peers []map[string]string) int64 {
	var sum, n int64
	for _, p := range peers {
		shared, of := Closeness(levels, node, p)
		if of == 0 {
			continue
		}
		sum += MaxScore * int64(shared) / int64(of)
		n++
	}
	if n == 0 {
		return TopologyNeutral
	}
	return sum / n
}

// NetworkTopology is the network-topology scorer as a CustomSchedulerPlugin: every node passes its
// filter, and its score is TopologyScore of the node's labels against the nodes of the pod's gang
// peers.
type NetworkTopology struct {
	// Levels are the hierarchy's label keys, outermost first (TopologyArgs.Levels).
	Levels []string
	// Peers returns the labels of the nodes that the other pods of pod's gang are placed or
	// assumed on (neuronetes-scheduler reads them from the scheduler's PodGroup state); nil, or
	// no peers: TopologyNeutral on every node.
	Peers func(pod *corev1.Pod) []map[string]string
}

// Name returns NetworkTopologyName.
func (NetworkTopology) Name() string { return NetworkTopologyName }

// Filter admits every node: distance makes a gang slower, not unfit (a hard bound is the
// PodGroup's schedulingConstraints.topology, which the scheduler enforces).
func (NetworkTopology) Filter(context.Context, *corev1.Pod, *corev1.Node) bool { return true }

// Score is TopologyScore(Levels, node labels, Peers(pod)).
func (t NetworkTopology) Score(_ context.Context, pod *corev1.Pod, node *corev1.Node) int64 {
	if t.Peers == nil {
		return TopologyNeutral
	}
	return TopologyScore(t.Levels, node.Labels, t.Peers(pod))
}

// GangName returns the PodGroup a pod belongs to (spec.schedulingGroup.podGroupName, as the
// AgentPool controller sets it on gang pods); false for a pod of no group.
func GangName(pod *corev1.Pod) (string, bool) {
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && *g.PodGroupName != "" {
		return *g.PodGroupName, true
	}
	return "", false
}

// OutsideGang returns pods without those of pod's own PodGroup (all of pods for a pod of no
// group). Headroom and zone spread count the pool's replicas on a node or in a zone; the other
// pods of the pod's gang are the same replica, whose pods belong together (NetworkTopology), so
// they are not counted against a node.
func OutsideGang(pod *corev1.Pod, pods []*corev1.Pod) []*corev1.Pod {
	group, ok := GangName(pod)
	if !ok {
		return pods
	}
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if g, ok := GangName(p); ok && g == group && p.Namespace == pod.Namespace {
			continue
		}
		out = append(out, p)
	}
	return out
}
