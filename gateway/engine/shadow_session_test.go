package engine

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/rollout"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// sessionMemory is the agents' shared session store (the sidecar's Redis): both pools' agents
// append the user turn under the conversation id they resolve as demoagent does (the
// X-Conversation-Id or X-Session-Id header, else the body's conversation_id, else user).
type sessionMemory struct {
	mu     sync.Mutex
	writes map[string]int
}

func (m *sessionMemory) agent(next func(http.ResponseWriter, *http.Request, map[string]any)) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		conv := ""
		for _, v := range []string{r.Header.Get("X-Conversation-Id"), r.Header.Get("X-Session-Id"), str(body["conversation_id"]), str(body["user"])} {
			if conv == "" {
				conv = v
			}
		}
		if conv != "" {
			m.mu.Lock()
			m.writes[conv]++
			m.mu.Unlock()
		}
		next(w, r, body)
	}
}

func str(v any) string { s, _ := v.(string); return s }

// rolloutHarness is an engine with a stable pool "pool" and a canary pool "pool-canary" of the
// same model under a rollout that mirrors every stable request.
func rolloutHarness(t *testing.T, stableB, canaryB *backend) (*harness, *rollout.Splitter) {
	h := newHarness(t, stableB)
	canaryPool := &route.Pool{Ref: route.PoolRef{Namespace: "ns", Name: "pool-canary"}, Model: "m", AgentClass: "cls2",
		Policy: route.DefaultPolicy(), Endpoints: []route.Endpoint{{Pod: canaryB.name, Addr: canaryB.name}}}
	h.e.Table.Store(route.NewSnapshot([]*route.Pool{h.pool, canaryPool}))
	table := rollout.NewTable(nil)
	table.Upsert(&rollout.View{Namespace: "ns", Name: "r", UID: "u", Stable: "pool", Canary: "pool-canary",
		Phase: nnv1.RolloutProgressing, Mirror: 100, StepID: "1-0", Run: 1})
	sp := &rollout.Splitter{Table: table, Store: rollout.NewMemoryStore(time.Hour, 0), Recorder: rollout.NewRecorder(prometheus.NewRegistry())}
	h.e.Ext.Selector, h.e.Ext.Mirrors, h.e.Ext.Observers = sp, []stage.Mirror{sp}, []stage.Observer{sp}
	return h, sp
}

// TestShadowCopyKeepsOutOfLiveSession: the rollout's shadow copy reaches the canary without
// any session key (no session header, no conversation_id, user or metadata.<key> its pools'
// policies read),
// so the live conversation's session memory is written once, by the stable pool's agent.
func TestShadowCopyKeepsOutOfLiveSession(t *testing.T) {
	stableB, canaryB := newBackend(t), newBackend(t)
	mem := &sessionMemory{writes: map[string]int{}}
	stableB.set(mem.agent(streamTokens(3, 0)))
	canaryB.set(mem.agent(streamTokens(3, 0)))
	h, _ := rolloutHarness(t, stableB, canaryB)
	// The stable pool's policy also reads a session key from metadata.chat (a RoutingPolicy's
	// body:metadata.<key>): the copy drops that field too.
	h.pool.Policy.SessionKeys = append([]route.KeySource{{Body: "metadata.chat"}}, route.DefaultSessionKeys...)

	s := h.do(context.Background(), anyone, nil, chat(true, `,"conversation_id":"conv-1","user":"alice","metadata":{"conversation_id":"conv-1","chat":"c-9","app":"x"}`))
	if s.err != nil || s.meta.Pool != "ns/pool" {
		t.Fatalf("live request: %v %+v", s.err, s.meta)
	}
	deadline := time.Now().Add(2 * time.Second)
	for canaryB.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if canaryB.count() != 1 {
		t.Fatalf("%d shadow copies reached the canary, want 1", canaryB.count())
	}
	sh := canaryB.last()
	for _, k := range []string{"X-Conversation-Id", "X-Session-Id"} {
		if v := sh.header.Get(k); v != "" {
			t.Errorf("shadow copy carries %s: %q", k, v)
		}
	}
	for _, f := range []string{"conversation_id", "user"} {
		if v, has := sh.body[f]; has {
			t.Errorf("shadow copy carries %s: %v", f, v)
		}
	}
	md, _ := sh.body["metadata"].(map[string]any)
	if _, has := md["conversation_id"]; has || md["chat"] != nil || md["app"] != "x" || md[rollout.ShadowMarker] != "true" {
		t.Errorf("shadow metadata %v", md)
	}
	live := stableB.last()
	key := live.header.Get("X-Conversation-Id")
	// The live request keeps its identity fields, each in the tenant's scoped form; the session
	// key's own field (metadata.chat) is exactly the header's key.
	liveMD, _ := live.body["metadata"].(map[string]any)
	for f, v := range map[string]any{"conversation_id": live.body["conversation_id"], "user": live.body["user"],
		"metadata.conversation_id": liveMD["conversation_id"]} {
		if s, _ := v.(string); len(s) != 32 || s == "conv-1" || s == "alice" {
			t.Errorf("the live request's %s is %v, want its scoped form", f, v)
		}
	}
	if liveMD["chat"] != key || liveMD["app"] != "x" {
		t.Errorf("the live request's metadata %v, want chat = the session key %q and app kept", liveMD, key)
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if len(mem.writes) != 1 || mem.writes[key] != 1 || key == "" {
		t.Fatalf("session writes %v, want one under the live key %q", mem.writes, key)
	}
}

// canaryGuard is a response guardrail of the canary pool's policy only: it flags a response
// that contains word (as guard.Stage marks guardrails:response), or blocks it when block is set.
type canaryGuard struct {
	word  string
	block bool
}

func (canaryGuard) Name() string { return "guardrails" }

func (g canaryGuard) NewStream(_ context.Context, req *stage.Request) stage.StreamFilter {
	if req.Pool.Name != "pool-canary" {
		return nil
	}
	return &canaryStream{g: g, req: req}
}

type canaryStream struct {
	g      canaryGuard
	req    *stage.Request
	acted  bool
	reason string
}

func (s *canaryStream) Write(_ int, text string) (string, error) {
	if strings.Contains(text, s.g.word) && !s.acted {
		s.acted = true
		s.req.Flags = append(s.req.Flags, "guardrails:response")
		if s.g.block {
			s.reason = "word " + s.g.word
		}
	}
	return text, nil
}

func (s *canaryStream) Close(int) (string, error) { return "", nil }

func (s *canaryStream) Blocked() (string, bool) { return s.reason, s.reason != "" }

// TestShadowOutcomeCarriesGuardrails: the canary pool's response guardrails run on the shadow
// copy's response (streamed and whole, flagged and blocked), so the copy counts as a safety
// action of the canary in the rollout's samples; the live request is not marked by them.
func TestShadowOutcomeCarriesGuardrails(t *testing.T) {
	for _, c := range []struct {
		name          string
		stream, block bool
	}{{"stream flag", true, false}, {"stream block", true, true}, {"whole flag", false, false}, {"whole block", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			stableB, canaryB := newBackend(t), newBackend(t)
			h, sp := rolloutHarness(t, stableB, canaryB)
			h.e.Ext.Filters = []stage.ChunkFilter{canaryGuard{word: "t1", block: c.block}}
			s := h.do(context.Background(), anyone, map[string]string{"X-Session-Id": "conv-1"}, chat(c.stream, ""))
			if s.err != nil || s.meta.Pool != "ns/pool" {
				t.Fatalf("live request: %v %+v", s.err, s.meta)
			}
			shadows := sp.Recorder.Requests.WithLabelValues("ns", "r", "1-0", "canary", "shadow", "ok")
			deadline := time.Now().Add(2 * time.Second)
			for testutil.ToFloat64(shadows) == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := testutil.ToFloat64(sp.Recorder.Safety.WithLabelValues("ns", "r", "1-0", "canary", "shadow")); got != 1 {
				t.Fatalf("canary shadow safety samples %v, want 1 (shadow requests %v)", got, testutil.ToFloat64(shadows))
			}
			if got := testutil.ToFloat64(sp.Recorder.Safety.WithLabelValues("ns", "r", "1-0", "stable", "live")); got != 0 {
				t.Fatalf("the live stable request was marked by the canary's guardrail: %v", got)
			}
		})
	}
}
