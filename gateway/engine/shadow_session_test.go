package engine

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
		conv := r.Header.Get("X-Conversation-Id")
		for _, v := range []string{r.Header.Get("X-Session-Id"), str(body["conversation_id"]), str(body["user"])} {
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

// TestShadowCopyKeepsOutOfLiveSession: the rollout's shadow copy reaches the canary without
// any session key (no session header, no conversation_id, user or metadata.conversation_id),
// so the live conversation's session memory is written once, by the stable pool's agent.
func TestShadowCopyKeepsOutOfLiveSession(t *testing.T) {
	stableB, canaryB := newBackend(t), newBackend(t)
	mem := &sessionMemory{writes: map[string]int{}}
	stableB.set(mem.agent(streamTokens(3, 0)))
	canaryB.set(mem.agent(streamTokens(3, 0)))
	h := newHarness(t, stableB)
	canaryPool := &route.Pool{Ref: route.PoolRef{Namespace: "ns", Name: "pool-canary"}, Model: "m", AgentClass: "cls2",
		Policy: route.DefaultPolicy(), Endpoints: []route.Endpoint{{Pod: canaryB.name, Addr: canaryB.name}}}
	h.e.Table.Store(route.NewSnapshot([]*route.Pool{h.pool, canaryPool}))
	table := rollout.NewTable(nil)
	table.Upsert(&rollout.View{Namespace: "ns", Name: "r", UID: "u", Stable: "pool", Canary: "pool-canary",
		Phase: nnv1.RolloutProgressing, Mirror: 100, StepID: "1-0", Run: 1})
	sp := &rollout.Splitter{Table: table, Store: rollout.NewMemoryStore(time.Hour, 0), Recorder: rollout.NewRecorder(prometheus.NewRegistry())}
	h.e.Ext.Selector, h.e.Ext.Mirrors, h.e.Ext.Observers = sp, []stage.Mirror{sp}, []stage.Observer{sp}

	s := h.do(context.Background(), anyone, nil, chat(true, `,"conversation_id":"conv-1","user":"alice","metadata":{"conversation_id":"conv-1","app":"x"}`))
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
	if _, has := md["conversation_id"]; has || md["app"] != "x" || md[rollout.ShadowMarker] != "true" {
		t.Errorf("shadow metadata %v", md)
	}
	live := stableB.last()
	if live.body["conversation_id"] != "conv-1" || live.body["user"] != "alice" {
		t.Errorf("the live request lost its fields: %v", live.body)
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	key := live.header.Get("X-Conversation-Id")
	if len(mem.writes) != 1 || mem.writes[key] != 1 || key == "" {
		t.Fatalf("session writes %v, want one under the live key %q", mem.writes, key)
	}
}
