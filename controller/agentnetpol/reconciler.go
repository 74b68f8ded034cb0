// Package agentnetpol keeps one NetworkPolicy in every namespace that has
// AgentPools: the agent policy the installer renders (the Helm chart's
// networkPolicy values), which selects the pool pods (label
// neuronetes.io/pool) and admits only what it lists. A namespace's users
// may create AgentPools but not NetworkPolicies, so every tenant namespace
// gets the policy without an admin listing it, and the controller puts it
// back when it is changed or deleted.
package agentnetpol

import (
	"context"
	"fmt"
	"os"

	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// LoadSpec reads a NetworkPolicySpec (YAML or JSON, unknown fields refused)
// from path. The spec must select pods: an empty podSelector would select
// every pod of the tenant's namespace, not only its agents.
func LoadSpec(path string) (networkingv1.NetworkPolicySpec, error) {
	return LoadSpecFlag("--agent-network-policy-file", path)
}

// LoadSpecFlag is LoadSpec for the file of the flag named in its errors.
func LoadSpecFlag(flag, path string) (networkingv1.NetworkPolicySpec, error) {
	var spec networkingv1.NetworkPolicySpec
	b, err := os.ReadFile(path)
	if err != nil {
		return spec, fmt.Errorf("%s: %w", flag, err)
	}
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		return spec, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if len(spec.PodSelector.MatchLabels) == 0 && len(spec.PodSelector.MatchExpressions) == 0 {
		return spec, fmt.Errorf("%s %s: podSelector is empty (it would select every pod of a namespace, not its agent pods)", flag, path)
	}
	if len(spec.PolicyTypes) == 0 {
		return spec, fmt.Errorf("%s %s: policyTypes is empty (name Ingress, Egress or both)", flag, path)
	}
	return spec, nil
}

// Desired is the policy of a namespace that has AgentPools.
func Desired(name, namespace string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{nnv1.ManagedByLabel: nnv1.ManagedByController},
		},
		Spec: *spec.DeepCopy(),
	}
}

// Action is what a reconcile does to a namespace's policy.
type Action int

// The actions, decided by Decide.
const (
	Keep Action = iota
	Create
	Update
	Delete
	// Conflict: a policy of that name exists that this controller does not
	// own; it is left alone and reported.
	Conflict
)

// Decide is the pure core of a reconcile: current is the namespace's policy
// of the managed name (nil when absent), pools whether the namespace has
// AgentPools.
func Decide(current *networkingv1.NetworkPolicy, pools bool, spec networkingv1.NetworkPolicySpec) Action {
	switch {
	case current == nil && !pools:
		return Keep
	case current == nil:
		return Create
	case current.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController:
		return Conflict
	case !pools:
		return Delete
	case !apiequality.Semantic.DeepEqual(current.Spec, spec):
		return Update
	}
	return Keep
}

// Reconciler applies Decide to a namespace. Requests name the namespace and
// the managed policy name.
type Reconciler struct {
	Client client.Client
	// Name is the policy's name in every namespace.
	Name string
	// Spec is the agent policy.
	Spec networkingv1.NetworkPolicySpec
}

// Reconcile brings one namespace's policy to Decide's answer.
func (r *Reconciler) Reconcile(ctx context.Context, ns string) error {
	logger := klog.FromContext(ctx).WithValues("namespace", ns, "networkPolicy", r.Name)
	var pools nnv1.AgentPoolList
	if err := r.Client.List(ctx, &pools, client.InNamespace(ns), client.Limit(1)); err != nil {
		return fmt.Errorf("listing AgentPools of %s: %w", ns, err)
	}
	var current *networkingv1.NetworkPolicy
	got := &networkingv1.NetworkPolicy{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: r.Name}, got); {
	case err == nil:
		current = got
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading NetworkPolicy %s/%s: %w", ns, r.Name, err)
	}
	want := Desired(r.Name, ns, r.Spec)
	switch Decide(current, len(pools.Items) > 0, r.Spec) {
	case Create:
		logger.Info("creating the agent NetworkPolicy")
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating NetworkPolicy %s/%s: %w", ns, r.Name, err)
		}
	case Update:
		logger.Info("restoring the agent NetworkPolicy's spec")
		current.Spec = want.Spec
		if err := r.Client.Update(ctx, current); err != nil {
			return fmt.Errorf("updating NetworkPolicy %s/%s: %w", ns, r.Name, err)
		}
	case Delete:
		logger.Info("deleting the agent NetworkPolicy: the namespace has no AgentPools")
		if err := r.Client.Delete(ctx, current); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting NetworkPolicy %s/%s: %w", ns, r.Name, err)
		}
	case Conflict:
		return fmt.Errorf("NetworkPolicy %s/%s exists without %s=%s: the agent policy is not applied there until it is renamed or removed", ns, r.Name, nnv1.ManagedByLabel, nnv1.ManagedByController)
	}
	return nil
}
