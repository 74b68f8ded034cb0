package agentsession

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// PodDisruptionBudgetName is the session's PodDisruptionBudget.
func PodDisruptionBudgetName(session string) string { return "session-" + session }

// PodDisruptionBudget refuses every voluntary eviction (the Eviction API: kubectl drain, the
// cluster autoscaler, Karpenter) of the session's running pod: minAvailable 1 over exactly the
// session's pods (label neuronetes.io/session=<session>), and a session has one running pod at a
// time. A drain cordons (or taints) the node first, which suspends the session (docs/sessions.md
// "Drain"); the suspension deletes the pod, which a PodDisruptionBudget does not stop, and the
// drain's next eviction finds it gone. A pod that is not Ready may be evicted
// (unhealthyPodEvictionPolicy AlwaysAllow): a crash-looping or still-starting pod holds no state
// a drain should wait for, and its preStop hold (holdForCheckpoint) still applies.
func PodDisruptionBudget(s *nnv1.AgentSession) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	always := policyv1.AlwaysAllow
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			Name: PodDisruptionBudgetName(s.Name), Namespace: s.Namespace,
			Labels: map[string]string{nnv1.SessionLabel: s.Name, nnv1.ManagedByLabel: nnv1.ManagedByController},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable:               &one,
			Selector:                   &metav1.LabelSelector{MatchLabels: map[string]string{nnv1.SessionLabel: s.Name}},
			UnhealthyPodEvictionPolicy: &always,
		},
	}
}
