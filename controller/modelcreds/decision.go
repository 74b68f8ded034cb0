package modelcreds

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

// PodModelAnnotation names, on a pod, the Model of its namespace whose weights it uses (the node
// agent's agent.PodModelAnnotation, repeated here so the controller does not import the agent).
const PodModelAnnotation = "neuronetes.io/model"

// FetchInput is what Decide looks at for one request: may the node agent on Node fetch the source
// credentials of Model?
type FetchInput struct {
	// Node is the node the caller's pod is bound to.
	Node *corev1.Node
	// Model is the Model asked for.
	Model *nnv1.Model
	// Pods are pods of the Model's namespace; only those bound to Node count.
	Pods []corev1.Pod
	// Pools and Classes are the AgentPools and AgentClasses of the Model's namespace.
	Pools   []nnv1.AgentPool
	Classes []nnv1.AgentClass
}

// Decision is Decide's answer: Allowed, or not, with a reason code (modelsrcapi.Reason*) and a
// message that names objects, never credentials.
type Decision struct {
	Allowed bool
	Reason  string
	Message string
}

// Decide says whether the node agent on in.Node may fetch the source credentials of in.Model. It
// may when the node has a reason to fetch the Model's weights:
//
//  1. a pod of the Model's namespace bound to the node (spec.nodeName) and not finished
//     (Succeeded/Failed) uses the Model: its annotation neuronetes.io/model names it, or its label
//     neuronetes.io/agentclass names an AgentClass of that namespace whose spec.modelRef names it
//     (the node agent pins the same pods); or
//  2. an AgentPool of the Model's namespace whose AgentClass (spec.agentClassRef) has spec.modelRef
//     naming the Model may place a pod on the node: the class template's nodeSelector and
//     required node affinity match the node's labels and fields, and the template tolerates the
//     node's NoSchedule and NoExecute taints. Resources are not considered.
//
// Anything else is refused with ReasonNotUsedOnNode. A Model without spec.source.secretRef has no
// credentials (ReasonNoSecretRef).
func Decide(in FetchInput) Decision {
	m, node := in.Model, in.Node
	key := m.Namespace + "/" + m.Name
	if m.Spec.Source.SecretRef == nil {
		return Decision{Reason: modelsrcapi.ReasonNoSecretRef, Message: fmt.Sprintf("Model %s has no spec.source.secretRef", key)}
	}
	classes := map[string]*nnv1.AgentClass{}
	for i := range in.Classes {
		if c := &in.Classes[i]; c.Namespace == m.Namespace {
			classes[c.Name] = c
		}
	}
	usesModel := func(c *nnv1.AgentClass) bool {
		return c != nil && c.Spec.ModelRef != nil && c.Spec.ModelRef.Name == m.Name
	}
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Namespace != m.Namespace || p.Spec.NodeName != node.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Annotations[PodModelAnnotation] == m.Name || (p.Annotations[PodModelAnnotation] == "" && usesModel(classes[p.Labels[nnv1.AgentClassLabel]])) {
			return Decision{Allowed: true, Reason: modelsrcapi.ReasonUsedByPod, Message: fmt.Sprintf("pod %s/%s on node %s uses Model %s", p.Namespace, p.Name, node.Name, key)}
		}
	}
	for i := range in.Pools {
		pool := &in.Pools[i]
		if pool.Namespace != m.Namespace || pool.Spec.AgentClassRef == nil {
			continue
		}
		c := classes[pool.Spec.AgentClassRef.Name]
		if usesModel(c) && schedulable(c.Spec.Template, node) {
			return Decision{Allowed: true, Reason: modelsrcapi.ReasonPoolMaySchedule, Message: fmt.Sprintf("AgentPool %s/%s of Model %s may place pods on node %s", pool.Namespace, pool.Name, key, node.Name)}
		}
	}
	return Decision{Reason: modelsrcapi.ReasonNotUsedOnNode, Message: fmt.Sprintf(
		"no pod on node %s uses Model %s and no AgentPool of it may place pods there", node.Name, key)}
}

// schedulable reports whether a pod of template may be placed on node by its nodeSelector,
// required node affinity and tolerations of the node's NoSchedule and NoExecute taints. A nil
// template has no constraints.
func schedulable(t *corev1.PodTemplateSpec, node *corev1.Node) bool {
	var spec corev1.PodSpec
	if t != nil {
		spec = t.Spec
	}
	if ok, err := nodeaffinity.NewRequiredNodeAffinity(spec.NodeSelector, spec.Affinity).Match(node); err != nil || !ok {
		return false
	}
	_, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}
