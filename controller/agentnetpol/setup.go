package agentnetpol

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// SetupWithManager registers the controller: AgentPool creations and
// deletions and changes to the managed policies enqueue their namespace.
// The manager's cache should hold only the managed policies (ManagedByLabel);
// a policy of the managed name without the label is then invisible and its
// create is answered AlreadyExists, which Reconcile treats as done.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: r.Name}}}
	})
	named := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.Name })
	return ctrl.NewControllerManagedBy(mgr).
		Named("agentnetworkpolicy").
		Watches(&nnv1.AgentPool{}, toNamespace, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		Watches(&networkingv1.NetworkPolicy{}, toNamespace, builder.WithPredicates(named)).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, r.Reconcile(ctx, req.Namespace)
		}))
}
