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
