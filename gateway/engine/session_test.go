package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// sessions is a fake session table: "namespace/name" -> views returned in turn (the last one
// repeated); it records the activity writes.
type sessions struct {
	mu    sync.Mutex
	views map[string][]sessionroute.View
	n     map[string]int
	wrote []string
}

func (s *sessions) PoolActive(string, string) ([]string, error) { return nil, nil }

func (s *sessions) Session(ns, name string) sessionroute.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.views[ns+"/"+name]
	if len(vs) == 0 {
		return sessionroute.View{}
	}
	i := min(s.n[ns+"/"+name], len(vs)-1)
	s.n[ns+"/"+name]++
	return vs[i]
}

func (s *sessions) RecordActivity(_ context.Context, ns, name string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote = append(s.wrote, ns+"/"+name)
	return nil
}

func (s *sessions) writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.wrote...)
}

func (h *harness) doSession(t *access.Tenant, session, body string) *sink {
	s := newSink()
	h.e.Handle(context.Background(), Inbound{Route: openai.RouteChat, Body: []byte(body), Protocol: "http", Tenant: t, Session: session}, s)
	return s
}

// TestSessionRoute: a request naming an AgentSession goes to that session's pod when the session
// belongs to the caller's namespace, after a hold when it is suspended; every other caller gets
// the same 404 as for a session that does not exist, and writes no activity.
func TestSessionRoute(t *testing.T) {
	b := newBackend(t)
	now := time.Now()
	ep := route.Endpoint{Pod: "s-2", Addr: b.name}
	run := sessionroute.View{Found: true, Phase: v1alpha1.SessionRunning, PhaseSince: now, Activity: now.Add(-time.Minute), Endpoint: ep}
	susp := sessionroute.View{Found: true, Phase: v1alpha1.SessionSuspended, PhaseSince: now.Add(-time.Minute), Activity: now.Add(-2 * time.Minute)}
	resuming := sessionroute.View{Found: true, Phase: v1alpha1.SessionResuming, PhaseSince: now}
	other := &access.Tenant{Name: "b", Namespace: "other", AllModels: true}
	dispatcher := &access.Tenant{Name: "dispatcher", Namespace: "ns", AllModels: true, Pool: &route.PoolRef{Namespace: "ns", Name: "pool"}}
	noModel := &access.Tenant{Name: "c", Namespace: "ns", Models: map[string]bool{"other": true}}
	cases := []struct {
		name     string
		tenant   *access.Tenant
		session  string
		views    []sessionroute.View
		off      bool
		stream   bool
		wantCode string // "" for a served request
		wantHeld bool
	}{
		{name: "running session of the caller's namespace, streamed", tenant: anyone, session: "s", views: []sessionroute.View{run}, stream: true},
		{name: "running session, whole response", tenant: anyone, session: "s", views: []sessionroute.View{run}},
		{name: "suspended session is held, resumed and streamed", tenant: anyone, session: "s",
			views: []sessionroute.View{susp, susp, resuming, run}, stream: true, wantHeld: true},
		{name: "unknown session", tenant: anyone, session: "nope", views: []sessionroute.View{run}, wantCode: "session_not_found"},
		{name: "another tenant naming the session", tenant: other, session: "s", views: []sessionroute.View{run}, wantCode: "session_not_found"},
		{name: "the dispatcher's pool-bound credential", tenant: dispatcher, session: "s", views: []sessionroute.View{run}, wantCode: "session_not_found"},
		{name: "a model the tenant may not use", tenant: noModel, session: "s", views: []sessionroute.View{run}, wantCode: "model_not_found"},
		{name: "session routes off", tenant: anyone, session: "s", views: []sessionroute.View{run}, off: true, wantCode: "session_not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			fake := &sessions{views: map[string][]sessionroute.View{"ns/s": tc.views}, n: map[string]int{}}
			if !tc.off {
				h.e.AgentSessions = &sessionroute.Router{Lookup: fake, Activity: fake, Cfg: sessionroute.Config{Poll: time.Millisecond, Timeout: 5 * time.Second}}
			}
			before := b.count()
			s := h.doSession(tc.tenant, tc.session, chat(tc.stream, ""))
			if tc.wantCode != "" {
				if s.err == nil || s.err.Status != 404 || s.err.Body.Code == nil || *s.err.Body.Code != tc.wantCode {
					t.Fatalf("answer %+v, want 404 %s", s.err, tc.wantCode)
				}
				if b.count() != before || len(fake.writes()) != 0 {
					t.Fatalf("refused request reached the pod (%d) or wrote activity %v", b.count()-before, fake.writes())
				}
				return
			}
			if s.err != nil {
				t.Fatalf("error %+v", s.err)
			}
			if b.count() != before+1 || s.meta.Pod != "s-2" || s.meta.Pool != "ns/"+SessionPoolName {
				t.Fatalf("served by %q of %q, backend requests %d", s.meta.Pod, s.meta.Pool, b.count()-before)
			}
			if tc.stream && (!s.finished || !strings.Contains(s.text(), "t2")) {
				t.Fatalf("stream not relayed: %q finished %v", s.text(), s.finished)
			}
			if !tc.stream && !strings.Contains(s.body, "t2") {
				t.Fatalf("response not relayed: %q", s.body)
			}
			if got, want := b.last().header.Get(HeaderConversation), h.e.Sessions.Scope(tc.tenant, "agentsession/s"); got != want {
				t.Errorf("backend conversation %q, want the scoped session key %q", got, want)
			}
			if got := b.last().header.Get("Connection"); got != "close" {
				t.Errorf("backend request Connection %q, want close (no idle connection to a session's process)", got)
			}
			if w := fake.writes(); len(w) != 1 || w[0] != "ns/s" {
				t.Errorf("activity writes %v, want one of ns/s", w)
			}
			if held := fake.n["ns/s"] > 1; held != tc.wantHeld {
				t.Errorf("held %v (lookups %d), want %v", held, fake.n["ns/s"], tc.wantHeld)
			}
		})
	}
}

// TestSessionHoldCountsAgainstQuota: a request held for a suspended session holds its tenant's
// concurrency quota, so a tenant cannot hold more requests than its MaxConcurrent; the hold
// ends with 504 session_resume_timeout naming the session and its phase.
func TestSessionHoldCountsAgainstQuota(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	susp := sessionroute.View{Found: true, Phase: v1alpha1.SessionSuspended, PhaseSince: now.Add(-time.Minute)}
	fake := &sessions{views: map[string][]sessionroute.View{"ns/s": {susp}}, n: map[string]int{}}
	h.e.AgentSessions = &sessionroute.Router{Lookup: fake, Activity: fake, Cfg: sessionroute.Config{Poll: time.Millisecond, Timeout: 300 * time.Millisecond}}
	tn := tenant("a", access.Quota{MaxConcurrent: 1})
	first := make(chan *sink)
	go func() { first <- h.doSession(tn, "s", chat(true, "")) }()
	deadline := time.Now().Add(2 * time.Second)
	for {
		fake.mu.Lock()
		held := fake.n["ns/s"] > 1
		fake.mu.Unlock()
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first request never held")
		}
		time.Sleep(time.Millisecond)
	}
	second := h.doSession(tn, "s", chat(true, ""))
	if second.err == nil || second.err.Status != 429 {
		t.Fatalf("second request while the first is held: %+v, want 429", second.err)
	}
	s := <-first
	if s.err == nil || s.err.Status != 504 || *s.err.Body.Code != "session_resume_timeout" ||
		!strings.Contains(s.err.Body.Message, "session s is still Suspended") {
		t.Fatalf("held request ended with %+v, want 504 session_resume_timeout naming s and Suspended", s.err)
	}
}
