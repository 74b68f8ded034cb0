package agentsession

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// setupWarmPool gives the session reconciler a cache of the warm pods (labelled WarmPoolLabel;
// namespace limits it as for the session pods) and registers the WarmPoolReconciler, which
// watches AgentClasses (their spec) and those pods (by their controller, the class).
func (r *Reconciler) setupWarmPool(mgr ctrl.Manager, namespace string) error {
	warm, err := labels.NewRequirement(nnv1.WarmPoolLabel, selection.Exists, nil)
	if err != nil {
		return fmt.Errorf("warm pod selector: %w", err)
	}
	opts := cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*warm)}}}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	pods, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return fmt.Errorf("warm pod cache: %w", err)
	}
	if err := mgr.Add(pods); err != nil {
		return fmt.Errorf("warm pod cache: %w", err)
	}
	r.WarmPods = pods
	r.hostClaims = &hostClaims{}
	wr := &WarmPoolReconciler{Client: r.Client, Pods: pods, APIReader: r.APIReader, NetworkPolicy: r.NetworkPolicy, RestoreHostImage: r.RestoreHostImage, hostClaims: r.hostClaims,
		Scheme: r.Scheme, Recorder: mgr.GetEventRecorderFor("agentsession-warmpool")}
	return ctrl.NewControllerManagedBy(mgr).
		Named("agentsession-warmpool").
		For(&nnv1.AgentClass{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Kind(pods, &corev1.Pod{},
			handler.TypedEnqueueRequestForOwner[*corev1.Pod](mgr.GetScheme(), mgr.GetRESTMapper(), &nnv1.AgentClass{}, handler.OnlyControllerOwner()))).
		Complete(wr)
}
