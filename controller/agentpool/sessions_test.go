package agentpool

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func poolSession(name string, phase nnv1.AgentSessionPhase, pod string, ownerUID types.UID) *nnv1.AgentSession {
	yes := true
	return &nnv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{nnv1.PoolSessionLabel: "pool"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: "pool", UID: ownerUID, Controller: &yes}}},
		Spec:   nnv1.AgentSessionSpec{ClassRef: nnv1.LocalObjectReference{Name: "demo"}},
		Status: nnv1.AgentSessionStatus{Phase: phase, PodName: pod},
	}
}

// TestReconcilePoolThroughSessions: a pool with spec.sessions keeps no pods of its own (a left
// one is deleted, none is created whatever spec.replicas says), and its status counts its own
// sessions: replicas their pods, readyReplicas the Running ones, desired those not Suspended;
// with every session Suspended all are 0. Without the session controller it is not Ready.
func TestReconcilePoolThroughSessions(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		sessions                    []*nnv1.AgentSession
		off                         bool
		wantReplicas, wantReady, wd int32
		wantReadyCond               metav1.ConditionStatus
	}{
		{name: "two running", sessions: []*nnv1.AgentSession{poolSession("a", nnv1.SessionRunning, "a-1", "pool-uid"), poolSession("b", nnv1.SessionRunning, "b-1", "pool-uid")},
			wantReplicas: 2, wantReady: 2, wd: 2, wantReadyCond: metav1.ConditionTrue},
		{name: "one running, one resuming", sessions: []*nnv1.AgentSession{poolSession("a", nnv1.SessionRunning, "a-1", "pool-uid"), poolSession("b", nnv1.SessionResuming, "b-2", "pool-uid")},
			wantReplicas: 2, wantReady: 1, wd: 2, wantReadyCond: metav1.ConditionFalse},
		{name: "all suspended", sessions: []*nnv1.AgentSession{poolSession("a", nnv1.SessionSuspended, "", "pool-uid"), poolSession("b", nnv1.SessionSuspended, "", "pool-uid")},
			wantReadyCond: metav1.ConditionTrue},
		{name: "another pool's session with the label is not counted", sessions: []*nnv1.AgentSession{poolSession("a", nnv1.SessionRunning, "a-1", "other-uid")},
			wantReadyCond: metav1.ConditionTrue},
		{name: "no session controller", off: true, sessions: []*nnv1.AgentSession{poolSession("a", nnv1.SessionRunning, "a-1", "pool-uid")},
			wantReadyCond: metav1.ConditionFalse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testPool(3)
			pool.Spec.Autoscaling = nil
			pool.Spec.Sessions = &nnv1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: time.Minute}}
			yes := true
			left := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pool-0", Namespace: "ns", Labels: map[string]string{nnv1.PoolLabel: "pool"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: "pool", UID: "pool-uid", Controller: &yes}}}}
			objs := []client.Object{testClass(nil), pool, left}
			for _, s := range tc.sessions {
				objs = append(objs, s)
			}
			h := newHarness(t, objs...)
			h.r.Sessions = !tc.off
			h.reconcile()
			var pods corev1.PodList
			if err := h.c.List(context.Background(), &pods, client.InNamespace("ns"), client.MatchingLabels{nnv1.PoolLabel: "pool"}); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 0 {
				t.Fatalf("pool through sessions has %d pods of its own", len(pods.Items))
			}
			var got nnv1.AgentPool
			if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "pool"}, &got); err != nil {
				t.Fatal(err)
			}
			st := got.Status
			if st.Replicas != tc.wantReplicas || st.ReadyReplicas != tc.wantReady || st.DesiredReplicas != tc.wd || st.WarmReplicas != 0 || st.WarmTarget != 0 {
				t.Fatalf("status replicas %d ready %d desired %d warm %d/%d, want %d %d %d", st.Replicas, st.ReadyReplicas, st.DesiredReplicas,
					st.WarmReplicas, st.WarmTarget, tc.wantReplicas, tc.wantReady, tc.wd)
			}
			var ready *metav1.Condition
			for i := range st.Conditions {
				if st.Conditions[i].Type == nnv1.AgentPoolReady {
					ready = &st.Conditions[i]
				}
			}
			if ready == nil || ready.Status != tc.wantReadyCond || (tc.off && ready.Reason != "SessionsDisabled") {
				t.Fatalf("Ready condition %+v, want %s", ready, tc.wantReadyCond)
			}
		})
	}
}

// TestExpiredSessions: with spec.sessions.retention, a session of the pool Suspended for the
// retention since its last activity (the later of its suspension, status.lastActivity and the
// activity annotation) expires; a running one, a younger one, one woken by a request, another
// pool's and one being deleted do not; the next expiry is reported. Without retention: none.
func TestExpiredSessions(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	suspended := func(name string, since time.Duration) *nnv1.AgentSession {
		s := poolSession(name, nnv1.SessionSuspended, "", "pool-uid")
		s.Status.TransitionTime = ago(since)
		s.Status.LastActivity = ago(since + time.Minute)
		return s
	}
	old := suspended("old", 2*time.Hour)
	young := suspended("young", 50*time.Minute)
	woken := suspended("woken", 2*time.Hour)
	woken.Annotations = map[string]string{nnv1.SessionLastActivityAnnotation: now.Add(-time.Second).Format(time.RFC3339Nano)}
	running := poolSession("running", nnv1.SessionRunning, "running-1", "pool-uid")
	running.Status.TransitionTime = ago(3 * time.Hour)
	foreign := suspended("foreign", 2*time.Hour)
	foreign.OwnerReferences[0].UID = "other-uid"
	going := suspended("going", 2*time.Hour)
	going.DeletionTimestamp = ago(time.Second)
	all := []nnv1.AgentSession{*old, *young, *woken, *running, *foreign, *going}

	pool := testPool(0)
	pool.Spec.Sessions = &nnv1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: time.Minute}}
	if got, next := expiredSessions(pool, all, now); len(got) != 0 || next != 0 {
		t.Fatalf("without retention: expired %d, next %s", len(got), next)
	}
	pool.Spec.Sessions.Retention = &metav1.Duration{Duration: time.Hour}
	got, next := expiredSessions(pool, all, now)
	if len(got) != 1 || got[0].Name != "old" {
		names := []string{}
		for _, s := range got {
			names = append(names, s.Name)
		}
		t.Fatalf("expired %v, want [old]", names)
	}
	if next != 10*time.Minute {
		t.Fatalf("next expiry in %s, want 10m (young)", next)
	}
}

// TestReconcileDeletesSessionsPastRetention: the pool controller deletes its sessions past
// spec.sessions.retention and requeues for the next; a Running one stays.
func TestReconcileDeletesSessionsPastRetention(t *testing.T) {
	pool := testPool(0)
	pool.Spec.Autoscaling = nil
	pool.Spec.Sessions = &nnv1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: time.Minute}, Retention: &metav1.Duration{Duration: time.Hour}}
	old := poolSession("old", nnv1.SessionSuspended, "", "pool-uid")
	young := poolSession("young", nnv1.SessionSuspended, "", "pool-uid")
	running := poolSession("running", nnv1.SessionRunning, "running-1", "pool-uid")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the harness's clock
	oldAt, youngAt := metav1.NewTime(now.Add(-2*time.Hour)), metav1.NewTime(now.Add(-30*time.Minute))
	old.Status.TransitionTime, young.Status.TransitionTime, running.Status.TransitionTime = &oldAt, &youngAt, &oldAt
	h := newHarness(t, testClass(nil), pool, old, young, running)
	h.r.Sessions = true
	if !h.now.Equal(now) {
		t.Fatalf("the harness's clock is %s", h.now)
	}
	res := h.reconcile()
	var ss nnv1.AgentSessionList
	if err := h.c.List(context.Background(), &ss, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, s := range ss.Items {
		left[s.Name] = true
	}
	if left["old"] || !left["young"] || !left["running"] {
		t.Fatalf("sessions left %v, want young and running", left)
	}
	if res.RequeueAfter != 30*time.Minute {
		t.Fatalf("requeue after %s, want 30m (young's expiry)", res.RequeueAfter)
	}
}
