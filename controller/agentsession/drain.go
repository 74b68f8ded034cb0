package agentsession

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/interruption"
)

// nodeNameField indexes AgentSessions by status.nodeName, so a node's change finds its sessions.
const nodeNameField = "status.nodeName"

// sessionNode is the nodeNameField index: a session's status.nodeName.
func sessionNode(o client.Object) []string {
	if s, ok := o.(*nnv1.AgentSession); ok && s.Status.NodeName != "" {
		return []string{s.Status.NodeName}
	}
	return nil
}

// nodeDraining reports whether the node is cordoned or has an interruption taint
// (interruption.Draining with the controller's keys). A node that is gone is not draining: its
// pods are lost. fresh reads it through APIReader rather than the cache.
func (r *Reconciler) nodeDraining(ctx context.Context, name string, fresh bool) (bool, error) {
	if name == "" {
		return false, nil
	}
	var rd client.Reader = r.Client
	if fresh && r.APIReader != nil {
		rd = r.APIReader
	}
	var node corev1.Node
	if err := rd.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("get node %s: %w", name, err)
	}
	why, draining := interruption.Draining(&node, interruption.Keys(r.InterruptionTaints))
	if draining {
		klog.FromContext(ctx).V(2).Info("Session node draining", "node", name, "why", why)
	}
	return draining, nil
}

// sessionsOnDrainingNode maps a node to the sessions running on it, when it is draining.
func (r *Reconciler) sessionsOnDrainingNode(ctx context.Context, obj client.Object) []reconcile.Request {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return nil
	}
	if _, draining := interruption.Draining(node, interruption.Keys(r.InterruptionTaints)); !draining {
		return nil
	}
	var list nnv1.AgentSessionList
	if err := r.Client.List(ctx, &list, client.MatchingFields{nodeNameField: node.Name}); err != nil {
		klog.FromContext(ctx).Error(err, "Listing the sessions of a draining node", "node", node.Name)
		return nil
	}
	var out []reconcile.Request
	for _, s := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
	}
	return out
}

// AvoidNode makes the pod unschedulable on node: a required node affinity on metadata.name,
// added to every term the pod already requires (terms are ORed, so each must exclude it). A
// resume after a drain gets it, so that a template that tolerates the interruption taint still
// lands elsewhere; a cordon alone would keep the scheduler off the node anyway.
func AvoidNode(pod *corev1.Pod, node string) {
	if node == "" {
		return
	}
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	ns := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(ns.NodeSelectorTerms) == 0 {
		ns.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range ns.NodeSelectorTerms {
		ns.NodeSelectorTerms[i].MatchFields = append(ns.NodeSelectorTerms[i].MatchFields, req)
	}
}
