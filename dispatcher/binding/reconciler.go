package binding

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ToolRegistry receives the tool bindings (dispatcher/toolproxy).
type ToolRegistry interface {
	// Update adds or replaces a tool binding.
	Update(b *v1alpha1.ToolBinding)
	// Delete removes it.
	Delete(key types.NamespacedName)
}

// Reconciler keeps the Manager's consumers and the tool registry in step with ToolBindings,
// their AgentPools and AgentClasses (read from the informer cache).
type Reconciler struct {
	// Client reads from the cache.
	Client client.Client
	// Manager runs the consumers.
	Manager *Manager
	// Tools receives http and grpc bindings (optional).
	Tools ToolRegistry
	// Drain is how long a removed consumer's messages get to finish (default 10s).
	Drain time.Duration
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	drain := r.Drain
	if drain <= 0 {
		drain = 10 * time.Second
	}
	var b v1alpha1.ToolBinding
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Manager.Forget(ctx, req.NamespacedName, drain)
			if r.Tools != nil {
				r.Tools.Delete(req.NamespacedName)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if b.Spec.Type == "http" || b.Spec.Type == "grpc" {
		r.Manager.Forget(ctx, req.NamespacedName, drain)
		if r.Tools != nil {
			r.Tools.Update(&b)
		}
		return ctrl.Result{}, nil
	}
	if r.Tools != nil {
		r.Tools.Delete(req.NamespacedName)
	}
	if !Dispatched(&b) {
		r.Manager.Forget(ctx, req.NamespacedName, drain)
		return ctrl.Result{}, nil
	}
	pool, class, err := r.poolAndClass(ctx, &b)
	if err != nil {
		return ctrl.Result{}, err
	}
	s, err := Resolve(&b, pool, class)
	var fe *FieldError
	if errors.As(err, &fe) {
		r.Manager.SetError(ctx, req.NamespacedName, fe.Reason, fe.Error())
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	r.Manager.Apply(ctx, s)
	return ctrl.Result{}, nil
}

func (r *Reconciler) poolAndClass(ctx context.Context, b *v1alpha1.ToolBinding) (*v1alpha1.AgentPool, *v1alpha1.AgentClass, error) {
	if b.Spec.AgentPoolRef == nil {
		return nil, nil, nil
	}
	var pool v1alpha1.AgentPool
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.AgentPoolRef.Name}, &pool); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	var class v1alpha1.AgentClass
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: ClassOf(&pool)}, &class); err != nil {
		return &pool, nil, client.IgnoreNotFound(err)
	}
	return &pool, &class, nil
}

// ReadyReplicas reads a pool's status.readyReplicas from the cache (0 when missing).
func (r *Reconciler) ReadyReplicas(ns, pool string) int {
	var p v1alpha1.AgentPool
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: pool}, &p); err != nil {
		return 0
	}
	return int(p.Status.ReadyReplicas)
}

// bindingsOf maps a pool or class change to the bindings of its namespace that may use it.
func (r *Reconciler) bindingsOf(ctx context.Context, o client.Object) []reconcile.Request {
	var l v1alpha1.ToolBindingList
	if err := r.Client.List(ctx, &l, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, b := range l.Items {
		if b.Spec.AgentPoolRef != nil {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
		}
	}
	return out
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return ctrl.NewControllerManagedBy(mgr).Named("dispatcher-toolbindings").For(&v1alpha1.ToolBinding{}).
		Watches(&v1alpha1.AgentPool{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOf)).
		Watches(&v1alpha1.AgentClass{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOf)).
		Complete(r)
}
