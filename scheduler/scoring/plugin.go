package scoring

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// CustomSchedulerPlugin is seed 000's scheduling extension point, as neuronetes-scheduler runs it:
// a node filter and a node score per pod, given the pod and the node and nothing else (no
// snapshot of other pods, no normalization across nodes). The seed's interface has Filter and
// Score; Name is added because the scheduler framework registers and enables plugins by name.
// hack/tools/scheduler adapts an implementation into a framework Filter and Score plugin
// (customPlugin): Filter false makes the node unschedulable for the pod, and Score is clamped to
// [MinScore, MaxScore]. Scorers that need the other pods or a normalization (cost, headroom, zone
// spread) are framework plugins instead.
type CustomSchedulerPlugin interface {
	// Name is the plugin's name in a KubeSchedulerConfiguration profile.
	Name() string
	// Filter reports whether the pod may run on the node.
	Filter(ctx context.Context, pod *corev1.Pod, node *corev1.Node) bool
	// Score rates the node for the pod, higher better, in [MinScore, MaxScore].
	Score(ctx context.Context, pod *corev1.Pod, node *corev1.Node) int64
}

// ModelCache is the model-cache scorer as a CustomSchedulerPlugin: every node passes its filter,
// and its score is CacheScore of the pod's warm keys and the node's labels, with checkpoint
// presence folded in by CheckpointScore when the pod restores from a checkpoint whose node
// Checkpoints lets CheckpointNode find.
type ModelCache struct {
	// Checkpoints returns the AgentCheckpoints of a namespace (neuronetes-scheduler reads them
	// from an informer); nil scores warm weights only.
	Checkpoints func(namespace string) []nnv1.AgentCheckpoint
}

// ModelCacheName is ModelCache's plugin name.
const ModelCacheName = "NeuroNetesModelCache"

// Name returns ModelCacheName.
func (ModelCache) Name() string { return ModelCacheName }

// Filter admits every node: a cold node is slower to start, not unfit.
func (ModelCache) Filter(context.Context, *corev1.Pod, *corev1.Node) bool { return true }

// Score is CacheScore(WarmKeys(pod), node labels), then CheckpointScore with the node that holds
// the pod's checkpoint (CheckpointNode over Checkpoints(pod's namespace)).
func (m ModelCache) Score(_ context.Context, pod *corev1.Pod, node *corev1.Node) int64 {
	s := CacheScore(WarmKeys(pod), node.Labels)
	if m.Checkpoints == nil {
		return s
	}
	if _, _, ok := CheckpointRef(pod); !ok {
		return s
	}
	at := CheckpointNode(pod, m.Checkpoints(pod.Namespace))
	return CheckpointScore(s, at != "", at != "" && at == node.Name)
}
