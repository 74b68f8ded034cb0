package scaleloop

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ConditionProviderServed is the ToolBinding condition that says whether its queue provider is
// served: True when the autoscaler reads the queue's lag, False (reason ProviderNotServed) when
// the provider is accepted by the CRD but nothing reads it yet.
const ConditionProviderServed = "ProviderServed"

// ServedProviders are the queue providers whose lag the autoscaler reads (LagSource). A provider
// that gains a lag source is added here.
var ServedProviders = map[string]bool{"nats": true}

// BindingReconciler keeps the ProviderServed condition of queue ToolBindings, so that a binding
// whose provider is not served says so instead of being ignored.
type BindingReconciler struct {
	// Client reads from the cache and writes status.
	Client client.Client
}

// Reconcile sets the condition of one ToolBinding.
func (r *BindingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b v1alpha1.ToolBinding
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := b.DeepCopy()
	if !providerCondition(&b) {
		return ctrl.Result{}, nil
	}
	if err := r.Client.Status().Patch(ctx, &b, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("patch toolbinding status: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("ToolBinding provider condition", "toolbinding", req.NamespacedName,
		"condition", meta.FindStatusCondition(b.Status.Conditions, ConditionProviderServed))
	return ctrl.Result{}, nil
}

// providerCondition sets or removes b's ProviderServed condition and reports whether it changed.
func providerCondition(b *v1alpha1.ToolBinding) bool {
	before := meta.FindStatusCondition(b.Status.Conditions, ConditionProviderServed)
	q := b.Spec.QueueConfig
	if b.Spec.Type != "queue" || q == nil {
		return meta.RemoveStatusCondition(&b.Status.Conditions, ConditionProviderServed)
	}
	c := metav1.Condition{Type: ConditionProviderServed, ObservedGeneration: b.Generation}
	if ServedProviders[q.Provider] {
		c.Status, c.Reason = metav1.ConditionTrue, "LagSourceAvailable"
		c.Message = fmt.Sprintf("the autoscaler reads the lag of %s queue %q", q.Provider, q.QueueName)
	} else {
		c.Status, c.Reason = metav1.ConditionFalse, "ProviderNotServed"
		c.Message = fmt.Sprintf("provider %s is not served yet: the autoscaler reads no lag from it (autoscaleOnLag has no effect) and no consumer reads the queue; served providers: %s",
			q.Provider, strings.Join(servedList(), ", "))
	}
	meta.SetStatusCondition(&b.Status.Conditions, c)
	after := meta.FindStatusCondition(b.Status.Conditions, ConditionProviderServed)
	return before == nil || before.Status != after.Status || before.Message != after.Message || before.ObservedGeneration != after.ObservedGeneration
}

func servedList() []string {
	out := make([]string, 0, len(ServedProviders))
	for p := range ServedProviders {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// SetupWithManager registers the reconciler.
func (r *BindingReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.ToolBinding{}).Named("toolbinding-provider").Complete(r)
}
