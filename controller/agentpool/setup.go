package agentpool

import (
	"context"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ctrl "sigs.k8s.io/controller-runtime"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// SetupWithManager registers the reconciler: it watches AgentPools, their pods and Services, and
// the AgentClasses and Models the pools use.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&nnv1.AgentPool{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, spotShareChanged))).
		Owns(&corev1.Pod{}).
		Owns(&corev1.Service{}).
		Watches(&nnv1.AgentClass{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfNamespace)).
		Watches(&nnv1.Model{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfNamespace))
	if r.Checkpoints {
		b = b.Watches(&nnv1.AgentCheckpoint{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var out []reconcile.Request
			for _, k := range checkpointPools(ctx, o) {
				out = append(out, reconcile.Request{NamespacedName: k})
			}
			return out
		}))
	}
	if r.Sessions {
		// A pool through sessions reports its sessions' phases (sessions.go).
		b = b.Watches(&nnv1.AgentSession{}, handler.EnqueueRequestsFromMapFunc(poolOfSession))
	}
	// A node's interruption taint reaches the pools with pods on it (onInterruption).
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeNameField, func(o client.Object) []string {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" && p.Labels[nnv1.PoolLabel] != "" {
			return []string{p.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.poolsOnNode), builder.WithPredicates(taintsChanged))
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("agentpool").
		Complete(r)
}

// poolsOfNamespace enqueues every pool in the object's namespace; classes and models are few and
// rarely change, so the fan-out is cheap.
func (r *Reconciler) poolsOfNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var pools nnv1.AgentPoolList
	if err := r.Client.List(ctx, &pools, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(pools.Items))
	for _, p := range pools.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return out
}

// spotShareChanged passes status updates that change status.cost.spotPercent, the spot share the
// budget action enable-spot grants, so that new pods are placed by it at once.
var spotShareChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*nnv1.AgentPool)
		n, ok2 := e.ObjectNew.(*nnv1.AgentPool)
		if !ok1 || !ok2 {
			return false
		}
		share := func(p *nnv1.AgentPool) int32 {
			if p.Status.Cost == nil || p.Status.Cost.SpotPercent == nil {
				return -1
			}
			return *p.Status.Cost.SpotPercent
		}
		return share(o) != share(n)
	},
}

// podNodeNameField indexes pool pods by spec.nodeName.
const podNodeNameField = "spec.nodeName"

// poolsOnNode enqueues the pools with pods on the node.
func (r *Reconciler) poolsOnNode(ctx context.Context, obj client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{podNodeNameField: obj.GetName()}); err != nil {
		return nil
	}
	seen := map[reconcile.Request]bool{}
	var out []reconcile.Request
	for _, p := range pods.Items {
		req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: p.Namespace, Name: p.Labels[nnv1.PoolLabel]}}
		if req.Name != "" && !seen[req] {
			seen[req] = true
			out = append(out, req)
		}
	}
	return out
}

// taintsChanged passes node updates that change the taints (an interruption notice).
var taintsChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		return ok1 && ok2 && !reflect.DeepEqual(o.Spec.Taints, n.Spec.Taints)
	},
}
