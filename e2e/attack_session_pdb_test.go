package e2e

import (
	"context"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// attackControllerCreatesForeignPDB: RBAC lets the controller create any PodDisruptionBudget (a
// session's, session-<s>, refuses the eviction of that session's pod); the controller-writes
// admission policy admits only that shape. As the controller, budgets that would hold back the
// eviction of a tenant's other pods (selecting them, selecting every pod, or unowned) are refused,
// and the tenant namespace has none of them afterwards.
func attackControllerCreatesForeignPDB(t *testing.T, e *Env, ns, controllerUser string) {
	t.Helper()
	ctx := context.Background()
	ctl := impersonate(t, e, controllerUser, nil)
	one := intstr.FromInt32(1)
	owner := []metav1.OwnerReference{{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentSession", Name: "s1", UID: "00000000-0000-0000-0000-000000000001", Controller: ptr(true)}}
	session := map[string]string{"neuronetes.io/session": "s1"}
	for _, tc := range []struct {
		what     string
		name     string
		labels   map[string]string
		owners   []metav1.OwnerReference
		selector *metav1.LabelSelector
	}{
		{"selecting a tenant's pods", "session-s1", session, owner, &metav1.LabelSelector{MatchLabels: map[string]string{"app": "victim"}}},
		{"selecting every pod", "session-s1", session, owner, &metav1.LabelSelector{}},
		{"without its session as owner", "session-s1", session, nil, &metav1.LabelSelector{MatchLabels: session}},
		{"of another name", "nn-e2e-victim-pdb", session, owner, &metav1.LabelSelector{MatchLabels: session}},
	} {
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name, Labels: tc.labels, OwnerReferences: tc.owners},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: tc.selector},
		}
		t.Cleanup(func() {
			_ = e.Kube.PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), tc.name, metav1.DeleteOptions{})
		})
		_, err := ctl.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
		if err == nil {
			t.Errorf("%s: created; want refused", tc.what)
			continue
		}
		wantRefused(t, err, "may only create PodDisruptionBudgets session-<s> of an AgentSession")
	}
	l, err := e.Kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		if p.Name == "session-s1" || p.Name == "nn-e2e-victim-pdb" {
			t.Errorf("PodDisruptionBudget %s/%s exists after the refused creations: %+v", ns, p.Name, p.Spec)
		}
	}
}
