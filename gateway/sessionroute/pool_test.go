package sessionroute

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// fakeCreator records created sessions, or fails.
type fakeCreator struct {
	made []*v1alpha1.AgentSession
	err  error
}

func (f *fakeCreator) CreateSession(_ context.Context, s *v1alpha1.AgentSession) error {
	f.made = append(f.made, s)
	return f.err
}

// TestAwaitPool: a pool's conversation session that does not exist is created and, while the
// cache has not shown it yet, "not found" holds the request instead of answering 404; one that
// exists is not created again; one that is another pool's gets 409; a failed create is 500; no
// creator (or no namespace) is 404.
func TestAwaitPool(t *testing.T) {
	owner := PoolOwner{Pool: "chat", UID: "u1", Class: "demo", IdleTimeout: time.Minute}
	mine := running
	mine.Pool, mine.PoolUID = "chat", "u1"
	theirs := running
	theirs.Pool, theirs.PoolUID = "chat", "u2"
	asleep := View{Found: true, Phase: v1alpha1.SessionSuspended, PhaseSince: t0, Activity: t0, Pool: "chat", PoolUID: "u1"}
	for _, tc := range []struct {
		name       string
		views      []View
		noCreator  bool
		createErr  error
		timeout    time.Duration
		maxActive  int // owner.MaxActive
		active     int // the pool's sessions holding a pod
		wantStatus int
		wantCode   string
		wantMade   int
		wantWoken  bool // an activity write for the session
	}{
		{name: "pool at maxReplicas: a new conversation 429, nothing created", views: []View{{}}, maxActive: 2, active: 2,
			wantStatus: 429, wantCode: "pool_sessions_full"},
		{name: "pool under maxReplicas: created", views: []View{{}, mine}, maxActive: 2, active: 1, wantMade: 1, wantWoken: true},
		{name: "pool at maxReplicas: a suspended session 429, not woken", views: []View{asleep}, maxActive: 2, active: 2,
			wantStatus: 429, wantCode: "pool_sessions_full"},
		{name: "pool at maxReplicas: a running session served", views: []View{mine}, maxActive: 1, active: 1, wantWoken: true},
		{name: "no bound: created beyond any count", views: []View{{}, mine}, active: 50, wantMade: 1, wantWoken: true},
		{name: "created, not in the cache yet, then running", views: []View{{}, {}, {}, mine}, wantMade: 1},
		{name: "exists: not created again", views: []View{mine}},
		{name: "created but never shown: 504", views: []View{{}}, timeout: 30 * time.Millisecond, wantMade: 1,
			wantStatus: 504, wantCode: "session_resume_timeout"},
		{name: "another pool's session of that name: 409", views: []View{theirs}, wantStatus: 409, wantCode: "session_conflict"},
		{name: "create fails: 500", views: []View{{}}, createErr: errors.New("forbidden"), wantMade: 1, wantStatus: 500, wantCode: "session_create_failed"},
		{name: "no creator: 404", views: []View{{}}, noCreator: true, wantStatus: 404, wantCode: "session_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lk := &fakeLookup{views: map[string][]View{"a/chat-x": tc.views}, active: map[string]int{"a/chat": tc.active}}
			cr := &fakeCreator{err: tc.createErr}
			reg := prometheus.NewRegistry()
			rec := &fakeRecorder{}
			owner := owner
			owner.MaxActive = tc.maxActive
			r := &Router{Lookup: lk, Activity: rec, Creator: cr, Metrics: NewMetrics(reg),
				Cfg: Config{Timeout: tc.timeout, Poll: time.Millisecond}}
			if tc.noCreator {
				r.Creator = nil
			}
			if r.Cfg.Timeout == 0 {
				r.Cfg.Timeout = 5 * time.Second
			}
			got, err := r.AwaitPool(context.Background(), "a", "chat-x", owner)
			if tc.wantStatus == 0 {
				if err != nil || got != ep {
					t.Fatalf("AwaitPool = %+v, %v", got, err)
				}
			} else if err == nil || err.Status != tc.wantStatus || err.Body.Code == nil || *err.Body.Code != tc.wantCode {
				t.Fatalf("AwaitPool error %+v, want %d %s", err, tc.wantStatus, tc.wantCode)
			}
			if len(cr.made) != tc.wantMade {
				t.Fatalf("created %d, want %d", len(cr.made), tc.wantMade)
			}
			if tc.maxActive > 0 && (len(rec.wrote) > 0) != tc.wantWoken {
				t.Errorf("activity writes %v, want woken %v", rec.wrote, tc.wantWoken)
			}
			if tc.wantMade > 0 && tc.createErr == nil {
				if n := testutil.ToFloat64(r.Metrics.Created.WithLabelValues("ok")); n != 1 {
					t.Errorf("created ok counted %v", n)
				}
				s := cr.made[0]
				if s.Name != "chat-x" || s.Namespace != "a" || s.Spec.ClassRef.Name != "demo" || s.Labels[v1alpha1.PoolSessionLabel] != "chat" {
					t.Errorf("created %s/%s %+v %v", s.Namespace, s.Name, s.Spec, s.Labels)
				}
			}
		})
	}
}

// TestPoolSession: the object the gateway creates, and a malformed workspace limit refused.
func TestPoolSession(t *testing.T) {
	s, err := PoolSession("a", "chat-0123456789abcdef", PoolOwner{Pool: "chat", UID: "u", Class: "demo", IdleTimeout: 2 * time.Minute, WorkspaceSizeLimit: "2Gi"})
	if err != nil {
		t.Fatal(err)
	}
	o := s.OwnerReferences
	if len(o) != 1 || o[0].APIVersion != "neuronetes.io/v1alpha1" || o[0].Kind != "AgentPool" || o[0].Name != "chat" || o[0].UID != "u" ||
		!*o[0].Controller || o[0].BlockOwnerDeletion != nil {
		t.Errorf("owners %+v", o)
	}
	if s.Spec.IdleTimeout.Duration != 2*time.Minute || s.Spec.WorkspaceSizeLimit.String() != "2Gi" || len(s.Annotations) != 0 {
		t.Errorf("spec %+v annotations %v", s.Spec, s.Annotations)
	}
	if _, err := PoolSession("a", "x", PoolOwner{WorkspaceSizeLimit: "lots"}); err == nil {
		t.Error("malformed workspace limit accepted")
	}
}
