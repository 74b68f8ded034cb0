package agentsession

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// SetupWithManager registers the controller: AgentSessions, the AgentCheckpoints they own,
// the nodes (a draining node enqueues the sessions whose status.nodeName it is), and
// their pods through a cache of its own that holds only pods labelled neuronetes.io/session (the
// manager's cache may hold only pool pods). namespace, when set, limits that cache to one
// namespace (as --namespace limits the manager's).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, namespace string) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("agentsession-controller")
	}
	sessionPods, err := labels.NewRequirement(nnv1.SessionLabel, selection.Exists, nil)
	if err != nil {
		return fmt.Errorf("session pod selector: %w", err)
	}
	opts := cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*sessionPods)}}}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	pods, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return fmt.Errorf("session pod cache: %w", err)
	}
	if err := mgr.Add(pods); err != nil {
		return fmt.Errorf("session pod cache: %w", err)
	}
	r.Pods = pods
	if err := r.setupWarmPool(mgr, namespace); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &nnv1.AgentSession{}, nodeNameField, sessionNode); err != nil {
		return fmt.Errorf("index agentsessions by node: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("agentsession").
		For(&nnv1.AgentSession{}).
		Owns(&nnv1.AgentCheckpoint{}).
		WatchesRawSource(source.Kind(pods, &corev1.Pod{},
			handler.TypedEnqueueRequestForOwner[*corev1.Pod](mgr.GetScheme(), mgr.GetRESTMapper(), &nnv1.AgentSession{}, handler.OnlyControllerOwner()))).
		// A node that turns cordoned or gets an interruption taint: its running sessions.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.sessionsOnDrainingNode)).
		Complete(r)
}
