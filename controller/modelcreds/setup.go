package modelcreds

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// CacheByObject is the manager cache entry for Secrets this reconciler needs: only the copies in
// namespace (the labels of Desired). Tenant Secrets are never cached.
func CacheByObject(namespace string) cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{namespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{nnv1.ManagedByLabel: nnv1.ManagedByController, nnv1.ModelSourceLabel: "true"}),
	}
}

// SetupWithManager registers the reconciler. Spec changes and deletions of Models enqueue them
// (status writes by the node agents do not); every copy enqueues the Model its annotations name,
// so a copy whose Model went while the controller was down is deleted at start. The manager's
// cache must hold Secrets as CacheByObject says.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Secrets == nil {
		r.Secrets = mgr.GetAPIReader()
	}
	toModel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request { return r.modelOf(o) })
	return ctrl.NewControllerManagedBy(mgr).
		Named("modelcreds").
		For(&nnv1.Model{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, toModel).
		Complete(r)
}

// modelOf maps a copy to the Model its annotations name: none for a Secret outside Namespace, one
// without both annotations, or one naming a namespace other than WatchNamespace (when set).
func (r *Reconciler) modelOf(o client.Object) []reconcile.Request {
	a := o.GetAnnotations()
	ns, name := a[nnv1.ModelSourceNamespaceAnnotation], a[nnv1.ModelSourceNameAnnotation]
	if o.GetNamespace() != r.Namespace || ns == "" || name == "" || (r.WatchNamespace != "" && ns != r.WatchNamespace) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}
