package modelcreds

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

const readerRole = "nn-neuronetes-nodeagent-model-sources"

// TestReaderRules: get of exactly the copies, sorted and once each; nothing that is not a copy;
// no rule at all (never an empty resourceNames, which RBAC reads as every name) without copies.
func TestReaderRules(t *testing.T) {
	a, b := nnv1.ModelSourceSecretName("t1", "m"), nnv1.ModelSourceSecretName("t2", "m")
	tests := []struct {
		name  string
		in    []string
		names []string
	}{
		{name: "none", in: nil},
		{name: "only chart Secrets", in: []string{"nn-neuronetes-redis-users", "nn-neuronetes-webhook-tls"}},
		{name: "copies", in: []string{b, a, b}, names: []string{a, b}},
		{name: "copies among others", in: []string{"nn-neuronetes-checkpoint-signing", a}, names: []string{a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ReaderRules(tt.in)
			if tt.names == nil {
				if got != nil {
					t.Fatalf("ReaderRules(%v) = %+v, want no rule", tt.in, got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("ReaderRules(%v) = %+v, want one rule", tt.in, got)
			}
			r := got[0]
			if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"secrets"}) ||
				!slices.Equal(r.Verbs, []string{"get"}) || !slices.Equal(r.ResourceNames, tt.names) {
				t.Errorf("ReaderRules(%v) = %+v, want get of secrets %v", tt.in, r, tt.names)
			}
		})
	}
}

func copyFor(ns, name string) *corev1.Secret {
	m := model(ns, name, "s3://b/k", "creds")
	return Desired(m, secret(ns, "creds", "AWS_ACCESS_KEY_ID", "k"), release)
}

func reconcileAccess(t *testing.T, c client.Client) *rbacv1.Role {
	t.Helper()
	r := &AccessReconciler{Client: c, Roles: c, Namespace: release, Role: readerRole}
	res, err := r.Reconcile(context.Background(), reconcile.Request{})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if res.RequeueAfter != DefaultResync {
		t.Errorf("RequeueAfter = %v, want %v (a reset by Helm or by hand is undone)", res.RequeueAfter, DefaultResync)
	}
	var role rbacv1.Role
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: release, Name: readerRole}, &role); err != nil {
		t.Fatal(err)
	}
	return &role
}

// TestAccessFollowsTheCopies: the node agents' Role names exactly the copies of the release
// namespace: the chart's own Secrets there, an unlabelled Secret named like a copy, a copy in
// another namespace and a widened rule written by hand are not in it; deleting the last copy
// leaves no rule.
func TestAccessFollowsTheCopies(t *testing.T) {
	ctx := context.Background()
	a, b := copyFor("t1", "llama"), copyFor("t2", "mistral")
	elsewhere := copyFor("t3", "other")
	elsewhere.Namespace = "t3"
	fake := secret(release, nnv1.ModelSourceSecretName("t4", "fake"), "k", "v")
	chart := secret(release, "nn-neuronetes-redis-users", "gateway", "pw")
	widened := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: release, Name: readerRole},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}
	c := newClient(t, a, b, elsewhere, fake, chart, widened)

	role := reconcileAccess(t, c)
	if want := ReaderRules([]string{a.Name, b.Name}); len(role.Rules) != 1 || !slices.Equal(role.Rules[0].ResourceNames, want[0].ResourceNames) {
		t.Fatalf("rules %+v, want get of %v only", role.Rules, want[0].ResourceNames)
	}

	if err := c.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if role = reconcileAccess(t, c); len(role.Rules) != 1 || !slices.Equal(role.Rules[0].ResourceNames, []string{b.Name}) {
		t.Fatalf("after deleting %s: rules %+v, want get of %s only", a.Name, role.Rules, b.Name)
	}
	if err := c.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	if role = reconcileAccess(t, c); len(role.Rules) != 0 {
		t.Fatalf("without copies: rules %+v, want none", role.Rules)
	}
}

// TestAccessWithoutTheRole: a missing Role (the installer did not create it) is an error, not a
// Role the controller creates.
func TestAccessWithoutTheRole(t *testing.T) {
	c := newClient(t, copyFor("t1", "llama"))
	r := &AccessReconciler{Client: c, Roles: c, Namespace: release, Role: readerRole}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{}); err == nil {
		t.Fatal("Reconcile without the Role succeeded")
	}
	var list rbacv1.RoleList
	if err := c.List(context.Background(), &list); err != nil || len(list.Items) != 0 {
		t.Fatalf("Roles after the failed reconcile: %v %v, want none", list.Items, err)
	}
}
