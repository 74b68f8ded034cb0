package agentsession

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func testPool(sessions bool) *nnv1.AgentPool {
	p := &nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "a", UID: "pool-uid"},
		Spec: nnv1.AgentPoolSpec{AgentClassRef: &nnv1.LocalObjectReference{Name: "demo"}}}
	if sessions {
		q := resource.MustParse("64Mi")
		p.Spec.Sessions = &nnv1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: time.Minute}, WorkspaceSizeLimit: &q}
	}
	return p
}

// poolSessionOf is session s1 as the gateway creates it for pool chat.
func poolSessionOf() *nnv1.AgentSession {
	s := newSession(time.Minute)
	q := resource.MustParse("64Mi")
	s.Spec.WorkspaceSizeLimit = &q
	yes := true
	s.Labels = map[string]string{nnv1.PoolSessionLabel: "chat"}
	s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: "chat", UID: "pool-uid", Controller: &yes}}
	return s
}

// TestPoolRefusal: a pool's session is refused, naming the field, unless it is controlled by the
// existing pool its label names, that pool has spec.sessions, and the session has the pool's
// class, limits not above the pool's and no RuntimeClass of its own; other sessions never.
func TestPoolRefusal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(s *nnv1.AgentSession, p *nnv1.AgentPool) *nnv1.AgentPool
		field string // "" for admitted
	}{
		{"as the gateway creates it", func(*nnv1.AgentSession, *nnv1.AgentPool) *nnv1.AgentPool { return nil }, ""},
		{"shorter idle timeout and smaller workspace", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.Spec.IdleTimeout.Duration = time.Second
			q := resource.MustParse("1Mi")
			s.Spec.WorkspaceSizeLimit = &q
			return nil
		}, ""},
		{"not a pool's session", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.Labels, s.OwnerReferences = nil, nil
			return nil
		}, ""},
		{"pool missing", func(*nnv1.AgentSession, *nnv1.AgentPool) *nnv1.AgentPool { return &nnv1.AgentPool{} }, "metadata.ownerReferences"},
		{"pool recreated (another UID)", func(_ *nnv1.AgentSession, p *nnv1.AgentPool) *nnv1.AgentPool { p.UID = "other"; return nil }, "metadata.ownerReferences"},
		{"label names another pool", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.Labels[nnv1.PoolSessionLabel] = "other"
			return nil
		}, "metadata.ownerReferences"},
		{"owner not the controller", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.OwnerReferences[0].Controller = nil
			return nil
		}, "metadata.ownerReferences"},
		{"owner of another group", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.OwnerReferences[0].APIVersion = "evil.io/v1"
			return nil
		}, "metadata.ownerReferences"},
		{"only the label", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool { s.OwnerReferences = nil; return nil }, "metadata.ownerReferences"},
		{"pool without spec.sessions", func(_ *nnv1.AgentSession, p *nnv1.AgentPool) *nnv1.AgentPool { p.Spec.Sessions = nil; return nil }, "spec.sessions"},
		{"another class", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.Spec.ClassRef.Name = "gpu-big"
			return nil
		}, "spec.classRef"},
		{"pool's class by its name", func(_ *nnv1.AgentSession, p *nnv1.AgentPool) *nnv1.AgentPool { p.Spec.AgentClassRef = nil; return nil }, "spec.classRef"},
		{"no idle timeout", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool { s.Spec.IdleTimeout = nil; return nil }, "spec.idleTimeout"},
		{"longer idle timeout", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.Spec.IdleTimeout.Duration = time.Hour
			return nil
		}, "spec.idleTimeout"},
		{"larger workspace (the default 1Gi)", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.Spec.WorkspaceSizeLimit = nil
			return nil
		}, "spec.workspaceSizeLimit"},
		{"own RuntimeClass", func(s *nnv1.AgentSession, _ *nnv1.AgentPool) *nnv1.AgentPool {
			s.Spec.RuntimeClassName = ptr("kata")
			return nil
		}, "spec.runtimeClassName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := poolSessionOf(), testPool(true)
			if alt := tc.mut(s, p); alt != nil {
				p = nil // missing
			}
			msg := PoolRefusal(s, p)
			if tc.field == "" {
				if msg != "" {
					t.Fatalf("refused: %s", msg)
				}
				return
			}
			if !strings.HasPrefix(msg, tc.field+":") {
				t.Fatalf("refusal %q, want one naming %s", msg, tc.field)
			}
		})
	}
}

// TestReconcilePoolSessionRefused: a pool's session whose pool has no spec.sessions gets no pod,
// condition Ready=False reason PoolMismatch naming spec.sessions; once the pool has them, the
// next reconcile creates its pod.
func TestReconcilePoolSessionRefused(t *testing.T) {
	pool := testPool(false)
	h := newHarness(t, testClass(nil), pool, poolSessionOf())
	res, err := h.reconcile()
	if err != nil || res.RequeueAfter != poolRecheck {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	c := meta.FindStatusCondition(h.session().Status.Conditions, ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != PoolMismatchReason || !strings.HasPrefix(c.Message, "spec.sessions:") {
		t.Fatalf("condition %+v", c)
	}
	if h.podExists("s1-1") || h.session().Status.Pods != 0 {
		t.Fatal("a refused pool session got a pod")
	}
	q := resource.MustParse("64Mi")
	pool.Spec.Sessions = &nnv1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: time.Minute}, WorkspaceSizeLimit: &q}
	if err := h.c.Update(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionPending)
	if !h.podExists("s1-1") {
		t.Fatal("no pod once the pool has spec.sessions")
	}
}

// poolPeer is session name of pool chat in phase with pod ("" for none), controlled by the pool
// of UID uid.
func poolPeer(name string, phase nnv1.AgentSessionPhase, pod string, uid types.UID) *nnv1.AgentSession {
	s := poolSessionOf()
	s.Name = name
	s.OwnerReferences[0].UID = uid
	s.Status.Phase, s.Status.PodName = phase, pod
	return s
}

// TestPoolFull: a pool's session may take a pod while fewer than spec.maxReplicas of the pool's
// other sessions hold one; suspended sessions, pending ones without a pod, the session itself and
// another pool's sessions do not count.
func TestPoolFull(t *testing.T) {
	one := int32(1)
	pool := testPool(true)
	pool.Spec.MaxReplicas = &one
	self := poolSessionOf()
	for _, tc := range []struct {
		name   string
		others []*nnv1.AgentSession
		full   bool
	}{
		{"none", nil, false},
		{"one running", []*nnv1.AgentSession{poolPeer("s0", nnv1.SessionRunning, "s0-1", "pool-uid")}, true},
		{"one pending with its pod", []*nnv1.AgentSession{poolPeer("s0", nnv1.SessionPending, "s0-1", "pool-uid")}, true},
		{"one resuming", []*nnv1.AgentSession{poolPeer("s0", nnv1.SessionResuming, "s0-2", "pool-uid")}, true},
		{"one suspending", []*nnv1.AgentSession{poolPeer("s0", nnv1.SessionSuspending, "s0-1", "pool-uid")}, true},
		{"suspended and pending without a pod", []*nnv1.AgentSession{poolPeer("s0", nnv1.SessionSuspended, "", "pool-uid"),
			poolPeer("s2", nnv1.SessionPending, "", "pool-uid")}, false},
		{"itself, running", []*nnv1.AgentSession{poolPeer("s1", nnv1.SessionRunning, "s1-1", "pool-uid")}, false},
		{"another pool's of the same name", []*nnv1.AgentSession{poolPeer("s0", nnv1.SessionRunning, "s0-1", "other-uid")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var others []nnv1.AgentSession
			for _, o := range tc.others {
				others = append(others, *o)
			}
			msg := PoolFull(self, pool, others)
			if (msg != "") != tc.full || (tc.full && !strings.HasPrefix(msg, "spec.maxReplicas:")) {
				t.Fatalf("PoolFull = %q, want full %v (naming spec.maxReplicas)", msg, tc.full)
			}
		})
	}
}

// TestReconcilePoolSessionWaitsForASlot: with its pool at spec.maxReplicas (1, another session
// running), a new pool session gets no pod, condition Ready=False reason PoolFull, and is
// checked again soon; once the other is suspended, the next reconcile creates its pod. So two
// gateway replicas that each admitted a conversation for the last slot start only one.
func TestReconcilePoolSessionWaitsForASlot(t *testing.T) {
	one := int32(1)
	pool := testPool(true)
	pool.Spec.MaxReplicas = &one
	peer := poolPeer("s0", nnv1.SessionRunning, "s0-1", "pool-uid")
	h := newHarness(t, testClass(nil), pool, peer, poolSessionOf())
	res, err := h.reconcile()
	if err != nil || res.RequeueAfter != poolFullRecheck {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	c := meta.FindStatusCondition(h.session().Status.Conditions, ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != PoolFullReason || !strings.HasPrefix(c.Message, "spec.maxReplicas:") {
		t.Fatalf("condition %+v", c)
	}
	if h.podExists("s1-1") || h.session().Status.Pods != 0 {
		t.Fatal("a session beyond spec.maxReplicas got a pod")
	}
	var cur nnv1.AgentSession
	if err := h.c.Get(t.Context(), types.NamespacedName{Namespace: "a", Name: "s0"}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Status.Phase, cur.Status.PodName = nnv1.SessionSuspended, ""
	if err := h.c.Status().Update(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionPending)
	if !h.podExists("s1-1") {
		t.Fatal("no pod once the other session is suspended")
	}
}
