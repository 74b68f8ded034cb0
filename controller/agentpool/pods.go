package agentpool

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// GPUClaimName is the pod-level resource claim name that carries the AgentClass GPU request.
const GPUClaimName = "gpu"

// defaultDrainGraceSeconds is the termination grace period of drained pods when neither the pool
// nor the template sets one.
const defaultDrainGraceSeconds int64 = 30

// podName returns the pod name of slot index i of a pool. Invariant: names are a pure function
// of (pool, index), so a controller that restarts with a stale view and re-creates a slot gets
// AlreadyExists instead of an extra pod.
func podName(pool string, i int) string {
	return pool + "-" + strconv.Itoa(i)
}

// freeSlots returns the n lowest slot indexes whose pod names are not in used.
func freeSlots(pool string, used map[string]bool, n int) []string {
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		if name := podName(pool, i); !used[name] {
			out = append(out, name)
		}
	}
	return out
}

// podState reads a pod's warm-pool state label; pods without a valid one count as draining so
// they are never served nor activated.
func podState(p *corev1.Pod) warmpool.State {
	s, err := warmpool.ParseState(p.Labels[nnv1.StateLabel])
	if err != nil {
		return warmpool.Draining
	}
	return s
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podBuild holds what buildPod needs besides the pool.
type podBuild struct {
	class         *nnv1.AgentClass
	claimTemplate string // empty: no GPU claim
	warmNodeLabel string // empty: no placement preference
	drainGrace    int64
	spot          spotPlacement // spotStrategy; disabled: no capacity placement
	onDemandOnly  bool          // an interruption is being migrated: new pods require on-demand nodes
	// restores are the interrupted pods' checkpoints; each new serving pod of a migration takes
	// the next one and becomes a resume pod of restoreHostImage (interrupt_restore.go).
	restores         []restoreSource
	restoreHostImage string
}

// buildPod renders the pod of one slot from the AgentClass template.
func buildPod(pool *nnv1.AgentPool, name string, state warmpool.State, b podBuild) (*corev1.Pod, error) {
	if b.class.Spec.Template == nil || len(b.class.Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("agentclass %s: spec.template.spec.containers is empty", b.class.Name)
	}
	tmpl := b.class.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   pool.Namespace,
			Labels:      map[string]string{},
			Annotations: map[string]string{},
		},
		Spec: tmpl.Spec,
	}
	for k, v := range tmpl.Labels {
		pod.Labels[k] = v
	}
	for k, v := range tmpl.Annotations {
		pod.Annotations[k] = v
	}
	if state != warmpool.Warm {
		// Only warm pods are restored from a checkpoint; a cold serving pod starts as usual.
		delete(pod.Annotations, nnv1.RestoreFromAnnotation)
	}
	pod.Labels[nnv1.PoolLabel] = pool.Name
	pod.Labels[nnv1.StateLabel] = string(state)
	pod.Labels[nnv1.AgentClassLabel] = b.class.Name
	grace := b.drainGrace
	pod.Spec.TerminationGracePeriodSeconds = &grace
	if pod.Spec.Hostname == "" {
		pod.Spec.Hostname = strings.TrimSuffix(trunc(name, 63), "-")
	}

	if b.claimTemplate != "" {
		tn := b.claimTemplate
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{
			Name: GPUClaimName, ResourceClaimTemplateName: &tn,
		})
		c := &pod.Spec.Containers[0]
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: GPUClaimName})
	}
	if b.warmNodeLabel != "" {
		addPreferredNode(pod, b.warmNodeLabel)
	}
	addToolToken(pod)
	return pod, nil
}

// addPreferredNode makes the pod prefer nodes labelled key=true (the node agent's warm label).
func addPreferredNode(pod *corev1.Pod, key string) {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
			}}},
		})
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// servingSelector is the label selector of a pool's serving pods (Service and scale subresource).
func servingSelector(pool string) map[string]string {
	return map[string]string{nnv1.PoolLabel: pool, nnv1.StateLabel: nnv1.PodStateServing}
}

// selectorString renders servingSelector in label-selector syntax, keys sorted.
func selectorString(pool string) string {
	return nnv1.PoolLabel + "=" + pool + "," + nnv1.StateLabel + "=" + nnv1.PodStateServing
}
