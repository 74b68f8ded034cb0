package e2e

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// attackControllerDeletesForeignCheckpoint: RBAC lets the controller delete any AgentCheckpoint
// (the session controller removes a failed suspension's); the admission policy
// <release>-controller-checkpoint-deletes admits only a session's own. As the controller, a
// tenant's checkpoint of another agent, and one merely labelled with a session, are refused and
// stay.
func attackControllerDeletesForeignCheckpoint(t *testing.T, e *Env, ns, controllerUser string) {
	t.Helper()
	ctx := context.Background()
	admin := crClient(t, e.Config)
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerUser}
	ctl := crClient(t, cfg)
	for _, ck := range []*v1alpha1.AgentCheckpoint{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nn-e2e-victim-ck"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nn-e2e-labelled-ck", Labels: map[string]string{"neuronetes.io/session": "s1"}}},
	} {
		ck.Spec = v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Agent: "chat",
			Source: &v1alpha1.ContainerRef{Pod: "nn-e2e-absent"}}
		if err := admin.Create(ctx, ck); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s: %v", ck.Name, err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), ck) })
		err := ctl.Delete(ctx, &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ck.Name}})
		wantRefused(t, err, "may delete only the AgentCheckpoints of an AgentSession")
		if err := admin.Get(ctx, client.ObjectKeyFromObject(ck), &v1alpha1.AgentCheckpoint{}); err != nil {
			t.Fatalf("%s after the controller's delete: %v", ck.Name, err)
		}
	}
}

// attackControllerDeletesForeignSession: RBAC lets the controller delete any AgentSession (the
// AgentPool controller deletes a pool's suspended sessions past spec.sessions.retention); the
// admission policy <release>-controller-session-deletes admits only a session an AgentPool
// controls. As the controller, a tenant's own session, and one merely labelled with a pool, are
// refused and stay unchanged.
func attackControllerDeletesForeignSession(t *testing.T, e *Env, ns, controllerUser string) {
	t.Helper()
	ctx := context.Background()
	admin := crClient(t, e.Config)
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerUser}
	ctl := crClient(t, cfg)
	for _, s := range []*v1alpha1.AgentSession{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nn-e2e-victim-session"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nn-e2e-labelled-session", Labels: map[string]string{v1alpha1.PoolSessionLabel: "chat"}}},
	} {
		// Suspended by request from the start: the session controller, if it runs, makes no pod.
		s.Spec = v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "nn-e2e-absent-class"}, Suspend: true}
		if err := admin.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s: %v", s.Name, err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), s) })
		var before v1alpha1.AgentSession
		if err := admin.Get(ctx, client.ObjectKeyFromObject(s), &before); err != nil {
			t.Fatal(err)
		}
		err := ctl.Delete(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Name}})
		wantRefused(t, err, "may delete only the AgentSessions of an AgentPool through sessions")
		var after v1alpha1.AgentSession
		if err := admin.Get(ctx, client.ObjectKeyFromObject(s), &after); err != nil {
			t.Fatalf("%s after the controller's delete: %v", s.Name, err)
		}
		if after.UID != before.UID || !after.DeletionTimestamp.IsZero() || after.Spec.ClassRef != before.Spec.ClassRef {
			t.Fatalf("%s changed by the controller's refused delete: %+v", s.Name, after.ObjectMeta)
		}
	}
}
