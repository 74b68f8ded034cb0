package sessionroute

import (
	"context"
	"errors"
	"sync"
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

// gatedCreator holds every CreateSession until gate is closed, counting the sessions made.
type gatedCreator struct {
	mu   sync.Mutex
	made map[string]int
	gate chan struct{}
}

func (g *gatedCreator) CreateSession(ctx context.Context, s *v1alpha1.AgentSession) error {
	g.mu.Lock()
	g.made[s.Name]++
	g.mu.Unlock()
	select {
	case <-g.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestAwaitPoolBoundsABurst: new conversations arriving at once, before the cache shows any
// of their sessions, get no more sessions than spec.maxReplicas; a second request of a
// conversation already admitted takes no second slot; a slot is free again once its request is
// no longer held; a cache that cannot be read refuses as full.
func TestAwaitPoolBoundsABurst(t *testing.T) {
	owner := PoolOwner{Pool: "chat", UID: "u1", Class: "demo", IdleTimeout: time.Minute, MaxActive: 2}
	lk := &fakeLookup{views: map[string][]View{}, active: map[string]int{}}
	cr := &gatedCreator{made: map[string]int{}, gate: make(chan struct{})}
	r := &Router{Lookup: lk, Activity: &fakeRecorder{}, Creator: cr, Metrics: NewMetrics(prometheus.NewRegistry()),
		Cfg: Config{Timeout: 50 * time.Millisecond, Poll: time.Millisecond}}
	convs := []string{"chat-a", "chat-a", "chat-b", "chat-c", "chat-d", "chat-e"}
	codes := make([]string, len(convs))
	var wg sync.WaitGroup
	for i, name := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.AwaitPool(context.Background(), "a", name, owner); err != nil && err.Body.Code != nil {
				codes[i] = *err.Body.Code
			}
		}()
	}
	// Every request has either been refused or reached the creator (held at the gate).
	deadline := time.Now().Add(5 * time.Second)
	for {
		cr.mu.Lock()
		reached := 0
		for _, n := range cr.made {
			reached += n
		}
		cr.mu.Unlock()
		refused := testutil.ToFloat64(r.Metrics.Created.WithLabelValues("full"))
		if reached+int(refused) == len(convs) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(cr.gate)
	wg.Wait()
	if len(cr.made) != owner.MaxActive {
		t.Fatalf("sessions created for %v, want %d (spec.maxReplicas)", cr.made, owner.MaxActive)
	}
	full := 0
	for _, c := range codes {
		if c == "pool_sessions_full" {
			full++
		}
	}
	if want := len(convs) - owner.MaxActive - 1; full != want { // chat-a's second request takes no slot
		t.Errorf("429 pool_sessions_full %d times (%v), want %d", full, codes, want)
	}
	// The held requests timed out (the cache never showed their sessions): their slots are free.
	if _, err := r.AwaitPool(context.Background(), "a", "chat-f", owner); err == nil || *err.Body.Code != "session_resume_timeout" {
		t.Errorf("after the burst: %+v, want a slot (then the hold's timeout)", err)
	}
	lk.mu.Lock()
	lk.activeErr = errors.New("cache not synced")
	lk.mu.Unlock()
	if _, err := r.AwaitPool(context.Background(), "a", "chat-g", owner); err == nil || *err.Body.Code != "pool_sessions_full" {
		t.Errorf("with the cache unreadable: %+v, want 429 pool_sessions_full", err)
	}
}
