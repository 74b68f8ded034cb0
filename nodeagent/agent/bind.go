package agent

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
)

// Event reasons the node agent records on a pod bound to its node whose weights were cold.
const (
	// ReasonWeightsFetchStarted: the pod was bound here and its Model's weights are not warm; the
	// fetch (or warm-up) started at once, ahead of prewarm.
	ReasonWeightsFetchStarted = "WeightsFetchStarted"
	// ReasonWeightsReady: the weights are cached, verified and warm; the message gives the time
	// since WeightsFetchStarted.
	ReasonWeightsReady = "WeightsReady"
	// ReasonWeightsFetchFailed: the fetch failed; the message is the error (as in Model status).
	ReasonWeightsFetchFailed = "WeightsFetchFailed"
)

// BindTrigger is one Model whose weights must be fetched now because pods were bound to this node.
type BindTrigger struct {
	// Hex is the entry's digest.
	Hex string
	// Model is the Model the first pod uses.
	Model *v1alpha1.Model
	// Pods are the newly bound pods that use the entry, oldest first.
	Pods []*corev1.Pod
}

// PodModel returns the Model a pod uses (annotation neuronetes.io/model, else its AgentClass's
// modelRef), or nil. models and classes are keyed by "namespace/name".
func PodModel(p *corev1.Pod, classes map[string]*v1alpha1.AgentClass, models map[string]*v1alpha1.Model) *v1alpha1.Model {
	name := p.Annotations[PodModelAnnotation]
	if name == "" {
		if c := classes[p.Namespace+"/"+p.Labels[v1alpha1.AgentClassLabel]]; c != nil && c.Spec.ModelRef != nil {
			name = c.Spec.ModelRef.Name
		}
	}
	if name == "" {
		return nil
	}
	return models[p.Namespace+"/"+name]
}

// BindTriggers decides which fetches binding starts. A pod triggers once (handled holds the UIDs
// already decided) when it is bound to this node, still Pending (not running, finished or being
// deleted), and uses a
// Model with a valid digest whose entry is not Ready and warm here. Pods of one entry share one
// trigger (one fetch). Triggers are ordered by their oldest pod (creation time, then namespace/name),
// which is the order their fetches are started in. It returns the triggers and the UIDs of every pod
// it decided on (triggering or not), for the caller to add to handled; a pod whose Model does not
// exist yet, or has an invalid digest, is decided again at the next call.
func BindTriggers(pods []corev1.Pod, handled map[types.UID]bool, modelOf func(*corev1.Pod) *v1alpha1.Model, stateOf func(hex string) State) ([]BindTrigger, []types.UID) {
	live := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || handled[p.UID] || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		live = append(live, p)
	}
	sort.SliceStable(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	var out []BindTrigger
	at := map[string]int{}
	decided := make([]types.UID, 0, len(live))
	for _, p := range live {
		if p.Status.Phase == corev1.PodRunning {
			// Its containers started long before this call (e.g. the node agent restarted): not a
			// bind. Its pin still makes any fetch of its weights urgent.
			decided = append(decided, p.UID)
			continue
		}
		m := modelOf(p)
		if m == nil {
			continue // decided once its Model exists
		}
		h, err := cache.ParseDigest(m.Spec.Digest)
		if err != nil {
			continue // reported in the Model's status; decided once the digest is valid
		}
		decided = append(decided, p.UID)
		if i, ok := at[h]; ok {
			out[i].Pods = append(out[i].Pods, p)
			continue
		}
		if st := stateOf(h); st.Phase == PhaseReady && st.Warm {
			continue
		}
		at[h] = len(out)
		out = append(out, BindTrigger{Hex: h, Model: m, Pods: []*corev1.Pod{p}})
	}
	return out, decided
}
