package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

func sessionPod(name, session string, owner types.UID, ready bool) *corev1.Pod {
	yes := true
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, Labels: map[string]string{v1alpha1.SessionLabel: session},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentSession", Name: session, UID: owner, Controller: &yes}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// TestSessionLookup: the endpoint is the pod status.podName names only when it is the session's
// own (label and controlling owner UID) and Ready; the activity is the later of the annotation
// and status.lastActivity.
func TestSessionLookup(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	sess := func(pod string) *v1alpha1.AgentSession {
		return &v1alpha1.AgentSession{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s", UID: "uid-s",
				Annotations: map[string]string{v1alpha1.SessionLastActivityAnnotation: t0.Add(time.Minute).Format(time.RFC3339Nano)}},
			Status: v1alpha1.AgentSessionStatus{Phase: v1alpha1.SessionRunning, PodName: pod,
				LastActivity: &metav1.Time{Time: t0}, TransitionTime: &metav1.Time{Time: t0}},
		}
	}
	cases := []struct {
		name     string
		objs     []client.Object
		ns       string
		wantFind bool
		wantAddr string
	}{
		{name: "own ready pod", objs: []client.Object{sess("s-1"), sessionPod("s-1", "s", "uid-s", true)}, ns: "a", wantFind: true, wantAddr: "10.0.0.7:8000"},
		{name: "pod not ready", objs: []client.Object{sess("s-1"), sessionPod("s-1", "s", "uid-s", false)}, ns: "a", wantFind: true},
		{name: "pod of another owner", objs: []client.Object{sess("s-1"), sessionPod("s-1", "s", "uid-x", true)}, ns: "a", wantFind: true},
		{name: "pod labelled for another session", objs: []client.Object{sess("s-1"), sessionPod("s-1", "t", "uid-s", true)}, ns: "a", wantFind: true},
		{name: "no pod", objs: []client.Object{sess("")}, ns: "a", wantFind: true},
		{name: "another namespace", objs: []client.Object{sess("s-1"), sessionPod("s-1", "s", "uid-s", true)}, ns: "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objs...).Build()
			l := &SessionLookup{Reader: c, Log: klog.Background()}
			v := l.Session(tc.ns, "s")
			if v.Found != tc.wantFind || v.Endpoint.Addr != tc.wantAddr {
				t.Fatalf("view %+v, want found %v addr %q", v, tc.wantFind, tc.wantAddr)
			}
			if v.Found && (!v.Activity.Equal(t0.Add(time.Minute)) || !v.PhaseSince.Equal(t0)) {
				t.Errorf("activity %v since %v, want %v and %v", v.Activity, v.PhaseSince, t0.Add(time.Minute), t0)
			}
		})
	}
}

// TestSessionActivity: the patch sets the annotation and changes nothing else of the session.
func TestSessionActivity(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	orig := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s", Labels: map[string]string{"x": "y"}},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "demo"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(orig).Build()
	at := time.Date(2026, 1, 1, 12, 0, 0, 123, time.UTC)
	if err := (&SessionActivity{Client: c}).RecordActivity(context.Background(), "a", "s", at); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.AgentSession
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[v1alpha1.SessionLastActivityAnnotation] != "2026-01-01T12:00:00.000000123Z" || got.Labels["x"] != "y" || got.Spec.ClassRef.Name != "demo" {
		t.Fatalf("after the patch: %+v", got.ObjectMeta)
	}
	if err := (&SessionActivity{Client: c}).RecordActivity(context.Background(), "a", "missing", at); err == nil {
		t.Fatal("patching a missing session succeeded")
	}
}

// TestNotifySession: an AgentSession's event wakes that session's held requests, a session pod's
// event those of the session its label names, a tombstone the same; an unlabelled pod wakes none.
func TestNotifySession(t *testing.T) {
	ch := &sessionroute.Changes{}
	wake, cancel := ch.Subscribe("a", "s")
	defer cancel()
	woken := func() bool {
		select {
		case <-wake:
			return true
		default:
			return false
		}
	}
	pod := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", Labels: labels}}
	}
	for _, tc := range []struct {
		name string
		obj  any
		want bool
	}{
		{"the session", &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s"}}, true},
		{"another namespace's session of that name", &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "s"}}, false},
		{"its pod", pod(map[string]string{v1alpha1.SessionLabel: "s"}), true},
		{"another session's pod", pod(map[string]string{v1alpha1.SessionLabel: "t"}), false},
		{"an unlabelled pod", pod(nil), false},
		{"its deleted pod's tombstone", toolscache.DeletedFinalStateUnknown{Key: "a/p", Obj: pod(map[string]string{v1alpha1.SessionLabel: "s"})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notifySession(ch, tc.obj)
			if got := woken(); got != tc.want {
				t.Fatalf("woken %v, want %v", got, tc.want)
			}
		})
	}
}
