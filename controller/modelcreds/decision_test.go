package modelcreds

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

func testModel(ns, name string, secret bool) *nnv1.Model {
	m := &nnv1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: nnv1.ModelSpec{Source: nnv1.ModelSource{URI: "s3://b/" + name}}}
	if secret {
		m.Spec.Source.SecretRef = &nnv1.LocalObjectReference{Name: name + "-creds"}
	}
	return m
}

func testPod(ns, name, node string, labels, annotations map[string]string, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
}

func testClass(ns, name, model string, spec *corev1.PodSpec) nnv1.AgentClass {
	c := nnv1.AgentClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if model != "" {
		c.Spec.ModelRef = &nnv1.LocalObjectReference{Name: model}
	}
	if spec != nil {
		c.Spec.Template = &corev1.PodTemplateSpec{Spec: *spec}
	}
	return c
}

func testPool(ns, name, class string) nnv1.AgentPool {
	return nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: nnv1.AgentPoolSpec{AgentClassRef: &nnv1.LocalObjectReference{Name: class}}}
}

// TestDecide: a node may fetch a Model's credentials only when a live pod of the Model's namespace
// on that node uses it (annotation or AgentClass), or an AgentPool of it may place pods there
// (nodeSelector, required affinity, taints); pods on other nodes, finished pods, pods and pools
// of other namespaces and classes of other Models give no right.
func TestDecide(t *testing.T) {
	gpu := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{"pool": "gpu", "kubernetes.io/hostname": "gpu-1"}}}
	tainted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2", Labels: map[string]string{"pool": "gpu"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}}}
	soft := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-3", Labels: map[string]string{"pool": "gpu"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}}}}
	m := testModel("a", "llama", true)
	useAnn := map[string]string{PodModelAnnotation: "llama"}
	byClass := map[string]string{nnv1.AgentClassLabel: "chat"}
	onGPU := &corev1.PodSpec{NodeSelector: map[string]string{"pool": "gpu"}}
	onCPU := &corev1.PodSpec{NodeSelector: map[string]string{"pool": "cpu"}}
	affinityOther := &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"kwok-0"}}}}}}}}}
	tolerates := &corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		model   *nnv1.Model
		pods    []corev1.Pod
		pools   []nnv1.AgentPool
		classes []nnv1.AgentClass
		want    string
	}{
		{"nothing uses it", gpu, m, nil, nil, nil, modelsrcapi.ReasonNotUsedOnNode},
		{"no secretRef", gpu, testModel("a", "llama", false), []corev1.Pod{testPod("a", "p", "gpu-1", nil, useAnn, corev1.PodRunning)}, nil, nil, modelsrcapi.ReasonNoSecretRef},
		{"pod annotation on the node", gpu, m, []corev1.Pod{testPod("a", "p", "gpu-1", nil, useAnn, corev1.PodRunning)}, nil, nil, modelsrcapi.ReasonUsedByPod},
		{"pending pod bound to the node", gpu, m, []corev1.Pod{testPod("a", "p", "gpu-1", nil, useAnn, corev1.PodPending)}, nil, nil, modelsrcapi.ReasonUsedByPod},
		{"pod on another node", gpu, m, []corev1.Pod{testPod("a", "p", "kwok-0", nil, useAnn, corev1.PodRunning)}, nil, nil, modelsrcapi.ReasonNotUsedOnNode},
		{"unscheduled pod", gpu, m, []corev1.Pod{testPod("a", "p", "", nil, useAnn, corev1.PodPending)}, nil, nil, modelsrcapi.ReasonNotUsedOnNode},
		{"finished pod", gpu, m, []corev1.Pod{testPod("a", "p", "gpu-1", nil, useAnn, corev1.PodSucceeded), testPod("a", "q", "gpu-1", nil, useAnn, corev1.PodFailed)}, nil, nil, modelsrcapi.ReasonNotUsedOnNode},
		{"pod of another namespace naming the Model", gpu, m, []corev1.Pod{testPod("b", "p", "gpu-1", nil, useAnn, corev1.PodRunning)}, nil, nil, modelsrcapi.ReasonNotUsedOnNode},
		{"pod of another Model", gpu, m, []corev1.Pod{testPod("a", "p", "gpu-1", nil, map[string]string{PodModelAnnotation: "other"}, corev1.PodRunning)}, nil, nil, modelsrcapi.ReasonNotUsedOnNode},
		{"pod by its AgentClass", gpu, m, []corev1.Pod{testPod("a", "p", "gpu-1", byClass, nil, corev1.PodRunning)}, nil, []nnv1.AgentClass{testClass("a", "chat", "llama", nil)}, modelsrcapi.ReasonUsedByPod},
		{"annotation overrides the class", gpu, m, []corev1.Pod{testPod("a", "p", "gpu-1", byClass, map[string]string{PodModelAnnotation: "other"}, corev1.PodRunning)}, nil, []nnv1.AgentClass{testClass("a", "chat", "llama", nil)}, modelsrcapi.ReasonNotUsedOnNode},
		{"class of another namespace", gpu, m, []corev1.Pod{testPod("a", "p", "gpu-1", byClass, nil, corev1.PodRunning)}, nil, []nnv1.AgentClass{testClass("b", "chat", "llama", nil)}, modelsrcapi.ReasonNotUsedOnNode},
		{"pool without constraints", gpu, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", nil)}, modelsrcapi.ReasonPoolMaySchedule},
		{"pool selecting the node", gpu, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", onGPU)}, modelsrcapi.ReasonPoolMaySchedule},
		{"pool selecting other nodes", gpu, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", onCPU)}, modelsrcapi.ReasonNotUsedOnNode},
		{"pool with affinity to another node", gpu, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", affinityOther)}, modelsrcapi.ReasonNotUsedOnNode},
		{"pool not tolerating the taint", tainted, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", onGPU)}, modelsrcapi.ReasonNotUsedOnNode},
		{"pool tolerating the taint", tainted, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", tolerates)}, modelsrcapi.ReasonPoolMaySchedule},
		{"PreferNoSchedule taint does not keep a pool away", soft, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", nil)}, modelsrcapi.ReasonPoolMaySchedule},
		{"pool of a class of another Model", gpu, m, nil, []nnv1.AgentPool{testPool("a", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "other", nil)}, modelsrcapi.ReasonNotUsedOnNode},
		{"class without a pool", gpu, m, nil, nil, []nnv1.AgentClass{testClass("a", "chat", "llama", nil)}, modelsrcapi.ReasonNotUsedOnNode},
		{"pool of another namespace", gpu, m, nil, []nnv1.AgentPool{testPool("b", "p", "chat")}, []nnv1.AgentClass{testClass("a", "chat", "llama", nil), testClass("b", "chat", "llama", nil)}, modelsrcapi.ReasonNotUsedOnNode},
		{"pool naming a missing class", gpu, m, nil, []nnv1.AgentPool{testPool("a", "p", "gone")}, nil, modelsrcapi.ReasonNotUsedOnNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(FetchInput{Node: tc.node, Model: tc.model, Pods: tc.pods, Pools: tc.pools, Classes: tc.classes})
			wantAllowed := tc.want == modelsrcapi.ReasonUsedByPod || tc.want == modelsrcapi.ReasonPoolMaySchedule
			if d.Reason != tc.want || d.Allowed != wantAllowed || d.Message == "" {
				t.Fatalf("Decide = %+v, want reason %s (allowed %v)", d, tc.want, wantAllowed)
			}
		})
	}
}
