package agentsession

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/agentnetpol"
)

// NetworkPolicyName is the session's own NetworkPolicy.
func NetworkPolicyName(session string) string { return "session-" + session }

// NetworkPolicy is the session's NetworkPolicy: spec (the installer's session policy,
// agentnetpol.LoadSpec) with its podSelector narrowed to exactly the session's pods (label
// neuronetes.io/session=<session>), labelled as managed by the controller. Its policyTypes
// make the pod default-deny in each direction they name; only the rules of spec admit traffic.
func NetworkPolicy(s *nnv1.AgentSession, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	np := agentnetpol.Desired(NetworkPolicyName(s.Name), s.Namespace, spec)
	np.Labels[nnv1.SessionLabel] = s.Name
	np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{nnv1.SessionLabel: s.Name}}
	return np
}
