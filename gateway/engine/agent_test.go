package engine

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/utils/clock"

	agentengine "github.com/neuronetes/neuronetes/demoagent/engine"
	agentserver "github.com/neuronetes/neuronetes/demoagent/server"
	"github.com/neuronetes/neuronetes/gateway/guard"
	"github.com/neuronetes/neuronetes/gateway/guard/pii"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// agentBackend is a backend that answers with the demo agent, which refuses (400) a tool
// conversation missing a field, as vLLM does.
func agentBackend(t *testing.T) *backend {
	t.Helper()
	eng, err := agentengine.New(agentengine.Config{Slots: 4, BlockSize: 16, Blocks: 256, PrefixCaching: true, PrefillRate: 1e6, DecodeRate: 5000}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	go eng.Run(t.Context())
	s, err := agentserver.New(agentserver.Config{Model: "m", AgentClass: "c", DefaultMaxTokens: 4, MaxBodyBytes: 1 << 20,
		FailMode: agentserver.FailStatus, ToolCalls: true}, eng, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	b := newBackend(t)
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		r.Body = io.NopCloser(bytes.NewReader(b.last().raw)) // requests to one backend are sequential here
		h.ServeHTTP(w, r)
	})
	return b
}

// shadowLike copies every request the way gateway/rollout's Splitter does (a clone with the
// shadow marker spliced into metadata).
type shadowLike struct {
	to   route.PoolRef
	done chan stage.Outcome
}

func (m shadowLike) Shadows(_ context.Context, r *stage.Request) []stage.Shadow {
	body := r.Body.Clone()
	_ = body.SetMetadata("neuronetes_shadow", "true")
	return []stage.Shadow{{Pool: m.to, Body: body, Done: func(o stage.Outcome) { m.done <- o }}}
}

// TestToolConversationReachesTheAgent sends tool conversations through the gateway with request
// redaction and a shadow copy on: every tool field reaches the demo agent byte for byte (it
// would answer 400 otherwise), only the redacted value changes, and the shadow copy differs only
// by its metadata marker.
func TestToolConversationReachesTheAgent(t *testing.T) {
	live, shadow := agentBackend(t), agentBackend(t)
	h := newHarness(t, live)
	shadowPool := &route.Pool{Ref: route.PoolRef{Namespace: "ns", Name: "canary"}, Model: "m", AgentClass: "c", Policy: route.DefaultPolicy(),
		Endpoints: []route.Endpoint{{Pod: shadow.name, Addr: shadow.name}}}
	h.e.Table.Store(route.NewSnapshot([]*route.Pool{h.pool, shadowPool}))
	ch, err := guard.NewChain(nil, guard.Entry{Name: "mail", Plugin: guard.PIIPlugin{Detector: pii.New(pii.Options{Entities: []pii.Entity{pii.Email}})}, Action: guard.Redact})
	if err != nil {
		t.Fatal(err)
	}
	pols := guard.NewPolicies()
	pols.Static = &guard.Policy{Name: "ns/p", Request: ch}
	h.e.Ext.Stages = []stage.RequestStage{&guard.Stage{Policies: pols}}
	done := make(chan stage.Outcome, 8)
	h.e.Ext.Mirrors = []stage.Mirror{shadowLike{shadowPool.Ref, done}}
	h.e.Ext.Selector = canary{to: h.pool.Ref}

	const conv = `"messages":[{"role":"system","content":"You are terse.","name":"policy"},` +
		`{"role":"user","name":"jane","content":[{"type":"text","text":"mail jane@example.com the forecast"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_7","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Lisbon\",\"days\":1.0e0}"}}]},` +
		`{"role":"tool","tool_call_id":"call_7","name":"get_weather","content":"sunny, 22\u00b0C"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"max_tokens":4`
	for _, tc := range []struct{ name, body string }{
		{"whole", `{"model":"m",` + conv + `}`},
		{"streamed", `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + conv + `}`},
		{"forced call", `{"model":"m","tool_choice":"required",` + conv + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := h.do(context.Background(), anyone, nil, tc.body)
			if s.err != nil {
				t.Fatalf("the agent refused the conversation: %v", s.err)
			}
			want := strings.Replace(tc.body, "jane@example.com", "<EMAIL_ADDRESS>", 1)
			if got := string(live.last().raw); got != want {
				t.Fatalf("agent got\n%s\nwant\n%s", got, want)
			}
			o := <-done
			if o.Err != "" || o.Status != 200 {
				t.Fatalf("shadow copy failed: %+v", o)
			}
			wantShadow := strings.TrimSuffix(want, "}") + `,"metadata":{"neuronetes_shadow":"true"}}`
			if got := string(shadow.last().raw); got != wantShadow {
				t.Fatalf("shadow agent got\n%s\nwant\n%s", got, wantShadow)
			}
			answer := s.body + strings.Join(s.events, "")
			if isCall := strings.Contains(answer, `"finish_reason":"tool_calls"`); isCall != (tc.name == "forced call") {
				t.Fatalf("answer %s", answer)
			}
		})
	}
	// A conversation that lost a field is refused by the agent, and the refusal reaches the
	// client: this is what a gateway that drops fields gets.
	s := h.do(context.Background(), anyone, nil, strings.Replace(`{"model":"m",`+conv+`}`, `"tool_call_id":"call_7",`, "", 1))
	if s.err == nil || s.err.Status != 400 || !strings.Contains(s.err.Body.Message, "tool_call_id") {
		t.Fatalf("a tool message without tool_call_id: %v", s.err)
	}
	<-done
}
