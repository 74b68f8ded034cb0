// Package interruption is the one policy for recognising a node that is going away: the node
// taint keys that announce a spot interruption or an imminent removal, and a cordon. Pools
// (controller/agentpool) migrate their pods off such nodes; sessions (controller/agentsession)
// suspend and resume elsewhere.
package interruption

import (
	corev1 "k8s.io/api/core/v1"
)

// DefaultTaints are the node taint keys that announce a spot interruption (or an imminent node
// removal): Karpenter v1 (karpenter.sh/disrupted) and v0.3x (karpenter.sh/disruption), the AWS
// node termination handler's spot interruption notice (aws-node-termination-handler/spot-itn)
// and GKE's node termination handler (cloud.google.com/impending-node-termination). The
// controller's --interruption-taint adds the admin's.
var DefaultTaints = []string{
	"karpenter.sh/disrupted",
	"karpenter.sh/disruption",
	"aws-node-termination-handler/spot-itn",
	"cloud.google.com/impending-node-termination",
}

// Keys is DefaultTaints followed by extra (the admin's keys), in a new slice.
func Keys(extra []string) []string {
	return append(append([]string(nil), DefaultTaints...), extra...)
}

// Taint returns the first taint of taints whose key is in keys.
func Taint(taints []corev1.Taint, keys []string) (corev1.Taint, bool) {
	for _, t := range taints {
		for _, k := range keys {
			if t.Key == k {
				return t, true
			}
		}
	}
	return corev1.Taint{}, false
}

// Draining reports whether node is going away: cordoned (spec.unschedulable, as kubectl cordon
// and kubectl drain set it) or tainted with one of keys (Keys). why names the cause
// ("cordoned" or "taint <key>"). A nil node (deleted) is not draining: its pods are lost.
func Draining(node *corev1.Node, keys []string) (why string, draining bool) {
	if node == nil {
		return "", false
	}
	if node.Spec.Unschedulable {
		return "cordoned", true
	}
	if t, ok := Taint(node.Spec.Taints, keys); ok {
		return "taint " + t.Key, true
	}
	return "", false
}
