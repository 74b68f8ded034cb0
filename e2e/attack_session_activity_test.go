package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// attackGatewayChangesSession: RBAC lets the gateway patch AgentSessions (to record their
// activity); the admission policy <release>-gateway-session-activity admits only the activity
// annotation. As the gateway, setting a tenant session's spec.suspend, or another annotation, is
// refused and the session stays as it was; deleting it is forbidden; the activity annotation
// itself is admitted. RBAC also lets the gateway create AgentSessions (a pool conversation's);
// a session of any other shape (no pool label and owner, or one that asks for its own
// RuntimeClass or to start suspended) is refused and does not exist afterwards.
func attackGatewayChangesSession(t *testing.T, e *Env, ns, gatewayUser string) {
	t.Helper()
	ctx := context.Background()
	admin := crClient(t, e.Config)
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: gatewayUser}
	gw := crClient(t, cfg)
	victim := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nn-e2e-victim-session"},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "nn-e2e-absent"}}}
	if err := admin.Create(ctx, victim); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create victim session: %v", err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), victim) })
	patch := func(body string) error {
		return gw.Patch(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victim.Name}},
			client.RawPatch(types.MergePatchType, []byte(body)))
	}
	wantRefused(t, patch(`{"spec":{"suspend":true}}`), "may not change an AgentSession's spec")
	wantRefused(t, patch(`{"metadata":{"annotations":{"checkpoint.neuronetes.io/restore-from":"x"}}}`), "may change only the annotation")
	wantRefused(t, patch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"tomorrow"}}}`, v1alpha1.SessionLastActivityAnnotation)), "must be an RFC 3339 time")
	wantForbidden(t, gw.Delete(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victim.Name}}))
	var got v1alpha1.AgentSession
	if err := admin.Get(ctx, client.ObjectKeyFromObject(victim), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Suspend || len(got.Annotations) != 0 {
		t.Fatalf("victim session changed by the gateway: suspend %v, annotations %v", got.Spec.Suspend, got.Annotations)
	}
	yes := true
	rogue := func(name string, pooled bool, mut func(*v1alpha1.AgentSession)) *v1alpha1.AgentSession {
		s := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "nn-e2e-absent"}, IdleTimeout: &metav1.Duration{Duration: time.Hour}}}
		if pooled {
			s.Labels = map[string]string{v1alpha1.PoolSessionLabel: "nn-e2e-pool"}
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: "nn-e2e-pool", UID: "0a0a0a0a-0000-0000-0000-000000000000", Controller: &yes}}
		}
		if mut != nil {
			mut(s)
		}
		return s
	}
	for _, tc := range []struct {
		s    *v1alpha1.AgentSession
		want string
	}{
		{rogue("nn-e2e-rogue-session", false, nil), "may create only an AgentSession labelled"},
		{rogue(v1alpha1.PoolSessionName("nn-e2e-pool", "k"), true, func(s *v1alpha1.AgentSession) { s.Spec.RuntimeClassName = ptr("runc") }), "no spec.suspend or spec.runtimeClassName"},
		{rogue(v1alpha1.PoolSessionName("nn-e2e-pool", "k"), true, func(s *v1alpha1.AgentSession) { s.Spec.Suspend = true }), "no spec.suspend or spec.runtimeClassName"},
		{rogue("nn-e2e-victim-0123456789abcdef", true, nil), "must be named"},
	} {
		wantRefused(t, gw.Create(ctx, tc.s), tc.want)
		if err := admin.Get(ctx, client.ObjectKeyFromObject(tc.s), &v1alpha1.AgentSession{}); !apierrors.IsNotFound(err) {
			t.Fatalf("session %s created by the gateway: %v", tc.s.Name, err)
		}
	}
	// The shape the gateway builds for a pool's conversation is admitted (the controller then
	// refuses it a pod: its pool does not exist).
	ok, err := sessionroute.PoolSession(ns, v1alpha1.PoolSessionName("nn-e2e-pool", "k2"), sessionroute.PoolOwner{Pool: "nn-e2e-pool",
		UID: "0a0a0a0a-0000-0000-0000-000000000000", Class: "nn-e2e-absent", IdleTimeout: time.Hour, WorkspaceSizeLimit: "64Mi"})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Create(ctx, ok); err != nil {
		t.Fatalf("the gateway's create of a pool conversation's session was refused: %v", err)
	}
	_ = admin.Delete(ctx, ok)
	at := time.Now().UTC().Format(time.RFC3339Nano)
	if err := patch(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.SessionLastActivityAnnotation, at)); err != nil {
		t.Fatalf("the gateway's activity write was refused: %v", err)
	}
}
