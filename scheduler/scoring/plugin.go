package scoring

import (
	"context"

	corev1 "k8s.io/api/core/v1"
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
// and its score is CacheScore of the pod's warm keys and the node's labels.
type ModelCache struct{}

// ModelCacheName is ModelCache's plugin name.
const ModelCacheName = "NeuroNetesModelCache"

// Name returns ModelCacheName.
func (ModelCache) Name() string { return ModelCacheName }

// Filter admits every node: a cold node is slower to start, not unfit.
func (ModelCache) Filter(context.Context, *corev1.Pod, *corev1.Node) bool { return true }

// Score is CacheScore(WarmKeys(pod), node labels).
func (ModelCache) Score(_ context.Context, pod *corev1.Pod, node *corev1.Node) int64 {
	return CacheScore(WarmKeys(pod), node.Labels)
}
