package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// poolSessions is a fake session table with a creator: a created session appears Running on
// the backend, as the controller would start it.
type poolSessions struct {
	sessions
	cmu     sync.Mutex
	created []*v1alpha1.AgentSession
	serve   route.Endpoint
}

func (p *poolSessions) CreateSession(_ context.Context, s *v1alpha1.AgentSession) error {
	p.cmu.Lock()
	p.created = append(p.created, s)
	p.cmu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.views[s.Namespace+"/"+s.Name] = []sessionroute.View{
		{Found: true, Phase: v1alpha1.SessionPending, Pool: s.Labels[v1alpha1.PoolSessionLabel], PoolUID: string(s.OwnerReferences[0].UID)},
		{Found: true, Phase: v1alpha1.SessionRunning, PhaseSince: time.Now(), Endpoint: p.serve,
			Pool: s.Labels[v1alpha1.PoolSessionLabel], PoolUID: string(s.OwnerReferences[0].UID)}}
	return nil
}

// TestPoolThroughSessions: a pool with spec.sessions serves each conversation (the tenant-scoped
// session key from the header or the body) by its own AgentSession, created on the first request
// with the pool's class, idle timeout and workspace limit, owned and labelled by the pool, and
// then reused; another tenant's same conversation id gets another session; a request without a
// conversation gets 400 session_key_required and a session of that name that is not the pool's
// 409, neither reaching a pod nor creating anything.
func TestPoolThroughSessions(t *testing.T) {
	b := newBackend(t)
	tenantB := &access.Tenant{Name: "b", Namespace: "ns", AllModels: true}
	ep := route.Endpoint{Pod: "sess-1", Addr: b.name}
	for _, tc := range []struct {
		name     string
		tenant   *access.Tenant
		hdr      map[string]string
		extra    string // body fields
		existing *sessionroute.View
		wantCode string
		wantNew  bool
		wantKey  string // the client's conversation id the session is named by
	}{
		{name: "first turn by header creates the session", tenant: anyone, hdr: map[string]string{"X-Conversation-Id": "c1"}, wantNew: true, wantKey: "c1"},
		{name: "first turn by body conversation_id", tenant: anyone, extra: `,"conversation_id":"c1"`, wantNew: true, wantKey: "c1"},
		{name: "first turn by body user", tenant: anyone, extra: `,"user":"u7"`, wantNew: true, wantKey: "u7"},
		{name: "another tenant's same conversation id", tenant: tenantB, hdr: map[string]string{"X-Conversation-Id": "c1"}, wantNew: true, wantKey: "c1"},
		{name: "next turn reuses the pool's session", tenant: anyone, hdr: map[string]string{"X-Conversation-Id": "c1"}, wantKey: "c1",
			existing: &sessionroute.View{Found: true, Phase: v1alpha1.SessionRunning, Endpoint: ep, Pool: "pool", PoolUID: "pool-uid"}},
		{name: "suspended session is woken and held", tenant: anyone, hdr: map[string]string{"X-Conversation-Id": "c1"}, wantKey: "c1",
			existing: &sessionroute.View{Found: true, Phase: v1alpha1.SessionSuspended, PhaseSince: time.Now().Add(-time.Minute), Pool: "pool", PoolUID: "pool-uid"}},
		{name: "no conversation", tenant: anyone, wantCode: "session_key_required"},
		{name: "a session of that name not the pool's", tenant: anyone, hdr: map[string]string{"X-Conversation-Id": "c1"}, wantCode: "session_conflict", wantKey: "c1",
			existing: &sessionroute.View{Found: true, Phase: v1alpha1.SessionRunning, Endpoint: ep, Pool: "other", PoolUID: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.pool.Sessions = &route.PoolSessions{UID: "pool-uid", IdleTimeout: 30 * time.Second, WorkspaceSizeLimit: "64Mi"}
			fake := &poolSessions{sessions: sessions{views: map[string][]sessionroute.View{}, n: map[string]int{}}, serve: ep}
			name := ""
			if tc.wantKey != "" {
				name = v1alpha1.PoolSessionName("pool", h.e.Sessions.Scope(tc.tenant, tc.wantKey))
			}
			if tc.existing != nil {
				v := *tc.existing
				if v.Phase == v1alpha1.SessionSuspended {
					run := v
					run.Phase, run.Endpoint = v1alpha1.SessionRunning, ep
					fake.views["ns/"+name] = []sessionroute.View{v, v, run}
				} else {
					fake.views["ns/"+name] = []sessionroute.View{v}
				}
			}
			h.e.AgentSessions = &sessionroute.Router{Lookup: fake, Activity: fake, Creator: fake,
				Cfg: sessionroute.Config{Poll: time.Millisecond, Timeout: 5 * time.Second}}
			before := b.count()
			s := h.do(context.Background(), tc.tenant, tc.hdr, chat(true, tc.extra))
			if tc.wantCode != "" {
				if s.err == nil || s.err.Body.Code == nil || *s.err.Body.Code != tc.wantCode {
					t.Fatalf("answer %+v, want %s", s.err, tc.wantCode)
				}
				if b.count() != before || len(fake.created) != 0 || len(fake.writes()) != 0 {
					t.Fatalf("refused request reached the pod (%d), created %d sessions or wrote activity %v", b.count()-before, len(fake.created), fake.writes())
				}
				return
			}
			if s.err != nil {
				t.Fatalf("error %+v", s.err)
			}
			if b.count() != before+1 || s.meta.Pod != "sess-1" || s.meta.Pool != "ns/pool" {
				t.Fatalf("served by %q of %q, backend requests %d", s.meta.Pod, s.meta.Pool, b.count()-before)
			}
			if got := b.last().header.Get("Connection"); got != "close" {
				t.Errorf("backend Connection %q, want close", got)
			}
			if got, want := b.last().header.Get(HeaderConversation), h.e.Sessions.Scope(tc.tenant, tc.wantKey); got != want {
				t.Errorf("backend conversation %q, want the scoped key %q", got, want)
			}
			if w := fake.writes(); len(w) == 0 || w[0] != "ns/"+name {
				t.Errorf("activity writes %v, want ns/%s", w, name)
			}
			if !tc.wantNew {
				if len(fake.created) != 0 {
					t.Fatalf("created %d sessions for an existing one", len(fake.created))
				}
				return
			}
			if len(fake.created) != 1 {
				t.Fatalf("created %d sessions, want 1", len(fake.created))
			}
			c := fake.created[0]
			o := c.OwnerReferences
			if c.Namespace != "ns" || c.Name != name || c.Labels[v1alpha1.PoolSessionLabel] != "pool" || len(o) != 1 ||
				o[0].Kind != "AgentPool" || o[0].Name != "pool" || o[0].UID != "pool-uid" || o[0].Controller == nil || !*o[0].Controller ||
				o[0].BlockOwnerDeletion != nil {
				t.Errorf("session %s/%s labels %v owners %+v", c.Namespace, c.Name, c.Labels, o)
			}
			if c.Spec.ClassRef.Name != "cls" || c.Spec.IdleTimeout == nil || c.Spec.IdleTimeout.Duration != 30*time.Second ||
				c.Spec.WorkspaceSizeLimit == nil || c.Spec.WorkspaceSizeLimit.String() != "64Mi" || c.Spec.Suspend || c.Spec.RuntimeClassName != nil {
				t.Errorf("session spec %+v", c.Spec)
			}
		})
	}
	// Tenants: the same conversation id of two tenants names two sessions.
	h := newHarness(t)
	if a, bb := v1alpha1.PoolSessionName("pool", h.e.Sessions.Scope(anyone, "c1")), v1alpha1.PoolSessionName("pool", h.e.Sessions.Scope(tenantB, "c1")); a == bb {
		t.Errorf("tenants A and B share session %s", a)
	}
}
