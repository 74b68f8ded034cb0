package scoring

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
)

// The benchmark's node and replica shape.
const (
	// GPUResource is the nodes' GPU extended resource.
	GPUResource = corev1.ResourceName("nvidia.com/gpu")
	// GPUsPerNode is every node's GPU count.
	GPUsPerNode = 8
	// ReplicaGPUs is each replica's GPU request.
	ReplicaGPUs = 2
	// KwokTaint is the taint (and annotation) of kwok nodes; replicas tolerate it.
	KwokTaint = "kwok.x-k8s.io/node"
	spotLabel = "karpenter.sh/capacity-type"
)

// ModelDigest is model m's digest; its warm label is nnv1.WarmNodeLabel(ModelDigest(m)). The model
// number leads the hex: the label keeps only the first 56 hex characters.
func ModelDigest(m int) string { return fmt.Sprintf("sha256:%08x%s", m+1, strings.Repeat("0", 56)) }

// Layout returns node i: zone i%3; spot when i%5 is 0 or 2 (40 %); on-demand $32.77/h, spot
// $12.00-13.50/h by i; warm for model m ("m<m>") when (i/3)%8 == m < models (each model warm on
// 2 nodes of every 24, spread over the zones).
func Layout(i, models int) Node {
	n := Node{Name: "scoring-" + strconv.Itoa(i), Zone: fmt.Sprintf("zone-%c", 'a'+i%3), GPUs: GPUsPerNode, Warm: map[string]bool{}}
	n.Spot = i%5 == 0 || i%5 == 2
	n.PricePerHour = 32.77
	if n.Spot {
		n.PricePerHour = 12 + 0.5*float64(i%4)
	}
	if m := (i / 3) % 8; m < models {
		n.Warm["m"+strconv.Itoa(m)] = true
	}
	return n
}

// NodeObject renders a layout node as a kwok Node with labels added: zone, instance type, the
// spot label, the block and rack labels where set, the warm labels of its models, the price annotation, GPUsPerNode GPUs.
func NodeObject(n Node, labels map[string]string) *corev1.Node {
	l := map[string]string{corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
		corev1.LabelTopologyZone: n.Zone, corev1.LabelInstanceTypeStable: "p4d.24xlarge"}
	for k, v := range labels {
		l[k] = v
	}
	if n.Spot {
		l[spotLabel] = "spot"
	}
	if n.Block != "" {
		l[BlockLabel] = n.Block
	}
	if n.Rack != "" {
		l[RackLabel] = n.Rack
	}
	for m := range n.Warm {
		i, _ := strconv.Atoi(m[1:])
		l[nnv1.WarmNodeLabel(ModelDigest(i))] = "true"
	}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods: resource.MustParse("110"), GPUResource: *resource.NewQuantity(GPUsPerNode, resource.DecimalSI)}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: l, Annotations: map[string]string{
			KwokTaint: "fake", cost.PriceAnnotation: strconv.FormatFloat(n.PricePerHour, 'f', 2, 64)}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: KwokTaint, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// ReplicaPod is replica r of pool "m<p>" as the controller renders a serving pod of an AgentClass
// with a model (pool, state and class labels; a preferred affinity of weight 100 for the model's
// warm node label), held on nodes labelled nodeSelector, for scheduler.
func ReplicaPod(ns, scheduler, image string, nodeSelector, labels map[string]string, p, r int) *corev1.Pod {
	pool := "m" + strconv.Itoa(p)
	gpus := *resource.NewQuantity(ReplicaGPUs, resource.DecimalSI)
	l := map[string]string{nnv1.PoolLabel: pool, nnv1.StateLabel: nnv1.PodStateServing, nnv1.AgentClassLabel: pool}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pool + "-" + strconv.Itoa(r), Namespace: ns, Labels: l},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			NodeSelector:  nodeSelector,
			Tolerations:   []corev1.Toleration{{Key: KwokTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: nnv1.WarmNodeLabel(ModelDigest(p)), Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}}}}}},
			Containers: []corev1.Container{{Name: "agent", Image: image, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{GPUResource: gpus}, Limits: corev1.ResourceList{GPUResource: gpus}}}},
		},
	}
}
