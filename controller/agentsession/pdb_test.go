package agentsession

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// checkSessionPDB fails unless session-s1's PodDisruptionBudget refuses every eviction of exactly
// the session's pods (minAvailable 1, selector neuronetes.io/session=s1 alone), lets a pod that
// is not Ready go, and is owned by the session (the garbage collector removes it with it).
func checkSessionPDB(t *testing.T, c client.Client) {
	t.Helper()
	var pdb policyv1.PodDisruptionBudget
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "session-s1"}, &pdb); err != nil {
		t.Fatalf("session PodDisruptionBudget: %v", err)
	}
	sp := pdb.Spec
	if sp.MinAvailable == nil || sp.MinAvailable.String() != "1" || sp.MaxUnavailable != nil {
		t.Errorf("minAvailable %v maxUnavailable %v, want 1 and none", sp.MinAvailable, sp.MaxUnavailable)
	}
	if sp.Selector == nil || len(sp.Selector.MatchExpressions) != 0 || len(sp.Selector.MatchLabels) != 1 || sp.Selector.MatchLabels[nnv1.SessionLabel] != "s1" {
		t.Errorf("selector %+v, want exactly neuronetes.io/session=s1", sp.Selector)
	}
	if sp.UnhealthyPodEvictionPolicy == nil || *sp.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("unhealthyPodEvictionPolicy %v, want AlwaysAllow", sp.UnhealthyPodEvictionPolicy)
	}
	if ref := metav1.GetControllerOf(&pdb); ref == nil || ref.Kind != "AgentSession" || ref.Name != "s1" || pdb.Labels[nnv1.SessionLabel] != "s1" {
		t.Errorf("owner %+v labels %v, want the session s1", ref, pdb.Labels)
	}
}

// TestReconcileCreatesSessionPodDisruptionBudget: the session's PodDisruptionBudget exists before
// its first pod and before its resume pod (created again when it was deleted), so a drain's
// eviction is refused and goes through the suspension instead (docs/sessions.md "Drain").
func TestReconcileCreatesSessionPodDisruptionBudget(t *testing.T) {
	h := newHarness(t, testClass(nil), newSession(0))
	var order []string
	h.r.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		switch obj.(type) {
		case *corev1.Pod:
			order = append(order, "Pod/"+obj.GetName())
		case *policyv1.PodDisruptionBudget:
			order = append(order, "PodDisruptionBudget/"+obj.GetName())
		}
		return c.Create(ctx, obj, opts...)
	}})
	ctx := context.Background()
	h.step(nnv1.SessionPending)
	checkSessionPDB(t, h.c)
	if len(order) != 2 || order[0] != "PodDisruptionBudget/session-s1" || order[1] != "Pod/s1-1" {
		t.Errorf("creations %v, want the PodDisruptionBudget before the pod", order)
	}
	h.ready("s1-1")
	s := h.step(nnv1.SessionRunning)
	s.Spec.Suspend = true
	if err := h.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionSuspending)
	h.finish("s1-1-suspend", nnv1.AgentCheckpointSucceeded)
	s = h.step(nnv1.SessionSuspended)
	if err := h.c.Delete(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "session-s1"}}); err != nil {
		t.Fatal(err)
	}
	s.Spec.Suspend = false
	if err := h.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	order = nil
	h.step(nnv1.SessionResuming)
	checkSessionPDB(t, h.c)
	if len(order) != 2 || order[0] != "PodDisruptionBudget/session-s1" || order[1] != "Pod/s1-2" {
		t.Errorf("creations on resume %v, want the PodDisruptionBudget before the pod", order)
	}
}
