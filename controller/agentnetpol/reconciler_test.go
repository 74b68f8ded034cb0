package agentnetpol

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

const policyName = "neuronetes-agents"

func agentSpec() networkingv1.NetworkPolicySpec {
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: nnv1.PoolLabel, Operator: metav1.LabelSelectorOpExists},
		}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "gateway"}},
		}}}},
	}
}

func TestDecide(t *testing.T) {
	owned := Desired(policyName, "t", agentSpec())
	drifted := owned.DeepCopy()
	drifted.Spec.Ingress = nil
	foreign := owned.DeepCopy()
	foreign.Labels = nil
	for _, tc := range []struct {
		name    string
		current *networkingv1.NetworkPolicy
		pools   bool
		want    Action
	}{
		{"no pools, no policy", nil, false, Keep},
		{"pools, no policy", nil, true, Create},
		{"pools, policy as desired", owned, true, Keep},
		{"pools, policy changed", drifted, true, Update},
		{"pools gone", owned, false, Delete},
		{"someone else's policy of that name", foreign, true, Conflict},
		{"someone else's policy, no pools", foreign, false, Conflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.current, tc.pools, agentSpec()); got != tc.want {
				t.Errorf("Decide = %v, want %v", got, tc.want)
			}
		})
	}
}

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := nnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

func TestReconcileLifecycle(t *testing.T) {
	ctx := context.Background()
	pool := &nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "tenant-b"}}
	c := newClient(t, pool)
	r := &Reconciler{Client: c, Name: policyName, Spec: agentSpec()}
	key := types.NamespacedName{Namespace: "tenant-b", Name: policyName}

	if err := r.Reconcile(ctx, "tenant-b"); err != nil {
		t.Fatal(err)
	}
	var got networkingv1.NetworkPolicy
	if err := c.Get(ctx, key, &got); err != nil {
		t.Fatalf("policy not created: %v", err)
	}
	if got.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController || len(got.Spec.Ingress) != 1 {
		t.Fatalf("created policy = %+v", got)
	}

	// A change to the policy's spec is reverted.
	got.Spec.Ingress = append(got.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if err := c.Update(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx, "tenant-b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &got); err != nil || len(got.Spec.Ingress) != 1 {
		t.Fatalf("drifted policy not restored: %v %+v", err, got.Spec)
	}

	// The last pool goes: so does the policy.
	if err := c.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx, "tenant-b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &got); !apierrors.IsNotFound(err) {
		t.Fatalf("policy still there after the last pool went: %v", err)
	}

	// A namespace that never had pools gets nothing.
	if err := r.Reconcile(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	var list networkingv1.NetworkPolicyList
	if err := c.List(ctx, &list, client.InNamespace("other")); err != nil || len(list.Items) != 0 {
		t.Fatalf("policies in a namespace without pools: %v %d", err, len(list.Items))
	}
}

func TestReconcileLeavesForeignPolicy(t *testing.T) {
	ctx := context.Background()
	foreign := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: policyName, Namespace: "t"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	c := newClient(t, foreign, &nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "t"}})
	r := &Reconciler{Client: c, Name: policyName, Spec: agentSpec()}
	err := r.Reconcile(ctx, "t")
	if err == nil || !strings.Contains(err.Error(), nnv1.ManagedByLabel) {
		t.Fatalf("Reconcile = %v, want a conflict naming %s", err, nnv1.ManagedByLabel)
	}
	var got networkingv1.NetworkPolicy
	if err := c.Get(ctx, types.NamespacedName{Namespace: "t", Name: policyName}, &got); err != nil || len(got.Spec.PolicyTypes) != 1 || got.Spec.PolicyTypes[0] != networkingv1.PolicyTypeEgress {
		t.Fatalf("foreign policy changed: %v %+v", err, got.Spec)
	}
}

func TestLoadSpec(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"valid", "podSelector: {matchExpressions: [{key: neuronetes.io/pool, operator: Exists}]}\npolicyTypes: [Ingress]\n", ""},
		{"unknown field", "podSelector: {matchLabels: {a: b}}\npolicyTypes: [Ingress]\ningres: []\n", "ingres"},
		{"empty selector", "podSelector: {}\npolicyTypes: [Ingress]\n", "podSelector is empty"},
		{"no policy types", "podSelector: {matchLabels: {a: b}}\n", "policyTypes is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadSpec(p)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("LoadSpec: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("LoadSpec = %v, want an error naming %q", err, tc.wantErr)
			}
		})
	}
	if _, err := LoadSpec(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "--agent-network-policy-file") {
		t.Fatalf("missing file: %v", err)
	}
}
