package agentsession

import (
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// SetupWithManager registers the controller: AgentSessions, and the pods, ServiceAccounts and
// AgentCheckpoints they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("agentsession-controller")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&nnv1.AgentSession{}).
		Owns(&corev1.Pod{}).
		Owns(&nnv1.AgentCheckpoint{}).
		Complete(r)
}
