package modelcreds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ReaderRules are the rules of the node agents' Role: get of exactly the copies named, sorted.
// No copy gives no rule at all, never a rule with empty resourceNames (which RBAC reads as every
// name). Names that are not copies (nnv1.ModelSourceSecretPrefix) are left out.
func ReaderRules(copies []string) []rbacv1.PolicyRule {
	var names []string
	for _, n := range copies {
		if strings.HasPrefix(n, nnv1.ModelSourceSecretPrefix) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return nil
	}
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: names}}
}

// AccessReconciler keeps the Role through which the node agents read the copies (the installer
// creates it and binds it to their ServiceAccount) granting get on exactly the copies that exist,
// so the node agents read no other Secret of the copies' namespace (the chart's webhook TLS, Redis
// users and checkpoint signing key live there). Every request means "the Role"; copies created or
// deleted enqueue it, and it is checked again every Resync (a Helm upgrade or a hand edit).
type AccessReconciler struct {
	// Client lists the copies (cached, label-selected) and updates the Role.
	Client client.Client
	// Roles reads the Role, uncached (the controller may get only that one Role).
	Roles client.Reader
	// Namespace holds the copies and the Role.
	Namespace string
	// Role is the Role's name.
	Role string
	// Resync is how often the Role is checked again; 0 means DefaultResync.
	Resync time.Duration
}

// Reconcile sets the Role's rules to ReaderRules of the copies in Namespace.
func (r *AccessReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var list corev1.SecretList
	if err := r.Client.List(ctx, &list, client.InNamespace(r.Namespace),
		client.MatchingLabels{nnv1.ManagedByLabel: nnv1.ManagedByController, nnv1.ModelSourceLabel: "true"}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the Model source copies in %s: %w", r.Namespace, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, s := range list.Items {
		if s.DeletionTimestamp == nil {
			names = append(names, s.Name)
		}
	}
	want := ReaderRules(names)
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.Role}
	var role rbacv1.Role
	if err := r.Roles.Get(ctx, key, &role); err != nil {
		return reconcile.Result{}, fmt.Errorf("reading the node agents' Role %s (the installer creates it): %w", key, err)
	}
	if len(role.Rules) == 0 && len(want) == 0 || apiequality.Semantic.DeepEqual(role.Rules, want) {
		return reconcile.Result{RequeueAfter: r.resync()}, nil
	}
	role.Rules = want
	if err := r.Client.Update(ctx, &role); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating the node agents' Role %s: %w", key, err)
	}
	klog.FromContext(ctx).Info("Node agents may read the Model source copies", "role", key, "copies", len(names))
	return reconcile.Result{RequeueAfter: r.resync()}, nil
}

// SetupWithManager registers the reconciler. The manager's cache must hold Secrets as
// CacheByObject says.
func (r *AccessReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Roles == nil {
		r.Roles = mgr.GetAPIReader()
	}
	the := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: r.Role}}
	toRole := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetNamespace() != r.Namespace || o.GetLabels()[nnv1.ModelSourceLabel] != "true" {
			return nil
		}
		return []reconcile.Request{the}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("modelcreds-access").
		Watches(&corev1.Secret{}, toRole).
		Complete(r)
}

func (r *AccessReconciler) resync() time.Duration {
	if r.Resync > 0 {
		return r.Resync
	}
	return DefaultResync
}
