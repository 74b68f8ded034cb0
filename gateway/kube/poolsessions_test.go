package kube

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// TestPoolSessionLookupAndCreate: a created pool session reads back with its pool (label) and
// the UID of its controlling AgentPool owner; an owner of another kind or group is not a pool;
// creating an existing session is not an error.
func TestPoolSessionLookupAndCreate(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).Build()
	cr := &SessionCreator{Client: c}
	l := &SessionLookup{Reader: c, Log: klog.Background()}
	yes := true
	for _, tc := range []struct {
		name     string
		owner    metav1.OwnerReference
		wantPool string
		wantUID  string
	}{
		{"pool owner", metav1.OwnerReference{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: "chat", UID: "u1", Controller: &yes}, "chat", "u1"},
		{"owner of another group", metav1.OwnerReference{APIVersion: "evil.io/v1", Kind: "AgentPool", Name: "chat", UID: "u1", Controller: &yes}, "chat", ""},
		{"owner not the controller", metav1.OwnerReference{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: "chat", UID: "u1"}, "chat", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, err := sessionroute.PoolSession("a", "chat-"+tc.wantUID+"x", sessionroute.PoolOwner{Pool: "chat", UID: "u1", Class: "demo", IdleTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			sess.OwnerReferences = []metav1.OwnerReference{tc.owner}
			for range 2 {
				if err := cr.CreateSession(context.Background(), sess.DeepCopy()); err != nil {
					t.Fatal(err)
				}
			}
			v := l.Session("a", sess.Name)
			if !v.Found || v.Pool != tc.wantPool || v.PoolUID != tc.wantUID {
				t.Fatalf("view %+v, want pool %q uid %q", v, tc.wantPool, tc.wantUID)
			}
		})
	}
}

// TestSessionsOf: spec.sessions reaches the routing table's pool; without it, nil.
func TestSessionsOf(t *testing.T) {
	q := resource.MustParse("64Mi")
	p := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{UID: "u"}}
	if sessionsOf(p) != nil {
		t.Fatal("a pool without spec.sessions routes through sessions")
	}
	p.Spec.Sessions = &v1alpha1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: time.Minute}, WorkspaceSizeLimit: &q}
	if got := sessionsOf(p); got == nil || got.UID != "u" || got.IdleTimeout != time.Minute || got.WorkspaceSizeLimit != "64Mi" || got.MaxActive != 10 {
		t.Fatalf("sessionsOf = %+v (MaxActive: spec.maxReplicas' default 10)", got)
	}
	three := int32(3)
	p.Spec.MaxReplicas = &three
	if got := sessionsOf(p); got.MaxActive != 3 {
		t.Fatalf("MaxActive %d, want spec.maxReplicas 3", got.MaxActive)
	}
}

// TestPoolActive: the pool's sessions that are not Suspended, counted only when the pool named
// by the label controls them (an owner of that name in another API group does not); other
// pools' and other namespaces' sessions do not count.
func TestPoolActive(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	sess := func(ns, name, pool, owner string, phase v1alpha1.AgentSessionPhase) *v1alpha1.AgentSession {
		x := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:          map[string]string{v1alpha1.PoolSessionLabel: pool},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: owner, UID: "u", Controller: &yes}}}}
		x.Status.Phase = phase
		return x
	}
	foreign := sess("a", "chat-7", "chat", "chat", v1alpha1.SessionRunning)
	foreign.OwnerReferences[0].APIVersion = "evil.io/v1" // an "AgentPool" of another group
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(foreign,
		sess("a", "chat-1", "chat", "chat", v1alpha1.SessionRunning),
		sess("a", "chat-2", "chat", "chat", v1alpha1.SessionPending),
		sess("a", "chat-3", "chat", "chat", v1alpha1.SessionResuming),
		sess("a", "chat-4", "chat", "chat", v1alpha1.SessionSuspended),
		sess("a", "chat-5", "chat", "chat", ""),                       // just created: will take a pod
		sess("a", "chat-6", "chat", "other", v1alpha1.SessionRunning), // labelled, not controlled by chat
		sess("a", "other-1", "other", "other", v1alpha1.SessionRunning),
		sess("b", "chat-1", "chat", "chat", v1alpha1.SessionRunning),
	).Build()
	l := &SessionLookup{Reader: c, Log: klog.Background()}
	for _, tc := range []struct {
		ns   string
		want string
	}{{"a", "chat-1 chat-2 chat-3 chat-5"}, {"b", "chat-1"}, {"c", ""}} {
		names, err := l.PoolActive(tc.ns, "chat")
		sort.Strings(names)
		if got := strings.Join(names, " "); err != nil || got != tc.want {
			t.Errorf("PoolActive(%s, chat) = %q, %v; want %q", tc.ns, got, err, tc.want)
		}
	}
}
