package interruption

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDraining(t *testing.T) {
	keys := Keys([]string{"example.com/reclaim"})
	taint := func(k string) *corev1.Node {
		return &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: k, Effect: corev1.TaintEffectNoSchedule}}}}
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		why  string
		want bool
	}{
		{"deleted node", nil, "", false},
		{"healthy node", &corev1.Node{}, "", false},
		{"cordoned", &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}, "cordoned", true},
		{"karpenter v1", taint("karpenter.sh/disrupted"), "taint karpenter.sh/disrupted", true},
		{"karpenter v0.3x", taint("karpenter.sh/disruption"), "taint karpenter.sh/disruption", true},
		{"aws spot notice", taint("aws-node-termination-handler/spot-itn"), "taint aws-node-termination-handler/spot-itn", true},
		{"gke termination", taint("cloud.google.com/impending-node-termination"), "taint cloud.google.com/impending-node-termination", true},
		{"admin's key", taint("example.com/reclaim"), "taint example.com/reclaim", true},
		{"unreachable is not an interruption", taint("node.kubernetes.io/unreachable"), "", false},
		{"the second node's own taint", taint("neuronetes.io/second-node"), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, got := Draining(tc.node, keys)
			if got != tc.want || why != tc.why {
				t.Fatalf("Draining = %q %v, want %q %v", why, got, tc.why, tc.want)
			}
		})
	}
}
