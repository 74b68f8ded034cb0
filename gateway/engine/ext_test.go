package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

func TestAccessAndBadInput(t *testing.T) {
	b := newBackend(t)
	h := newHarness(t, b)
	restricted := tenant("r", access.Quota{})
	tests := []struct {
		name   string
		t      *access.Tenant
		hdr    map[string]string
		body   string
		status int
		code   string
	}{
		{"malformed json", anyone, nil, `{"model":`, 400, "bad_request"},
		{"missing model", anyone, nil, `{"messages":[{"role":"user","content":"x"}]}`, 400, "bad_request"},
		{"wrong type", anyone, nil, `{"model":"m","messages":"hi"}`, 400, "bad_request"},
		{"unknown model, wildcard tenant", anyone, nil, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found"},
		{"unknown model, restricted tenant", restricted, nil, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found"},
		{"forbidden model", &access.Tenant{Name: "x", Namespace: "ns", Models: map[string]bool{"other": true}}, nil, chat(true, ""), 404, "model_not_found"},
		{"priority not allowed", tenant("p", access.Quota{}), map[string]string{HeaderPriority: "low"}, chat(true, ""), 403, "forbidden_priority"},
		{"priority invalid", anyone, map[string]string{HeaderPriority: "urgent"}, chat(true, ""), 400, "bad_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := h.do(context.Background(), tt.t, tt.hdr, tt.body)
			if s.err == nil || s.err.Status != tt.status || *s.err.Body.Code != tt.code {
				t.Fatalf("got %v, want %d %s", s.err, tt.status, tt.code)
			}
		})
	}
	if b.count() != 0 {
		t.Fatalf("%d bad requests reached the backend", b.count())
	}
	if s := h.do(context.Background(), tenant("p", access.Quota{}), map[string]string{HeaderPriority: "high"}, chat(true, "")); s.err != nil {
		t.Fatalf("allowed priority: %v", s.err)
	}
	// The pool's own class (normal by default) needs no grant: tenant "p" lists only high.
	if s := h.do(context.Background(), tenant("p", access.Quota{}), map[string]string{HeaderPriority: "normal"}, chat(true, "")); s.err != nil {
		t.Fatalf("default priority: %v", s.err)
	}
}

// TestModelNotFoundLeaksNothing: a served model the tenant may not use and a model nothing
// serves get the same status, code and message (but for the model's own name).
func TestModelNotFoundLeaksNothing(t *testing.T) {
	h := newHarness(t, newBackend(t))
	restricted := &access.Tenant{Name: "x", Namespace: "ns", Models: map[string]bool{"other": true}}
	served := h.do(context.Background(), restricted, nil, chat(false, ""))
	missing := h.do(context.Background(), restricted, nil, strings.Replace(chat(false, ""), `"model":"m"`, `"model":"nope"`, 1))
	if served.err == nil || missing.err == nil {
		t.Fatalf("errors %v, %v", served.err, missing.err)
	}
	want := strings.Replace(missing.err.Body.Message, "`nope`", "`m`", 1)
	if served.err.Status != missing.err.Status || served.err.Body.Message != want || *served.err.Body.Code != *missing.err.Body.Code {
		t.Fatalf("forbidden %d %q, missing %d %q", served.err.Status, served.err.Body.Message, missing.err.Status, missing.err.Body.Message)
	}
}

func TestNoEndpoint503(t *testing.T) {
	h := newHarness(t)
	s := h.do(context.Background(), anyone, nil, chat(true, ""))
	if s.err == nil || s.err.Status != 503 || s.err.RetryAfter != time.Second {
		t.Fatalf("err %v", s.err)
	}
	h.assertReleased(t)
}

// A tenant over its token rate gets 429 with Retry-After while another tenant is served.
func TestQuotaPerTenant(t *testing.T) {
	h := newHarness(t, newBackend(t))
	q := access.Quota{TokensPerMinute: 60, TokenBurst: 40} // the request costs ~4 prompt + 8 max tokens
	a, other := tenant("a", q), tenant("b", q)
	for i := 0; i < 3; i++ {
		if s := h.do(context.Background(), a, nil, chat(true, "")); s.err != nil {
			t.Fatalf("request %d: %v", i, s.err)
		}
	}
	// Usage corrected each charge to 7+3 tokens billed, leaving 40-30 = 10 (+ refill); the next
	// charge of 12 does not fit.
	s := h.do(context.Background(), a, nil, chat(true, ""))
	if s.err == nil || s.err.Status != 429 || s.err.RetryAfter <= 0 || *s.err.Body.Code != "quota_tokens" {
		t.Fatalf("over quota: %v", s.err)
	}
	if s := h.do(context.Background(), other, nil, chat(true, "")); s.err != nil {
		t.Fatalf("other tenant: %v", s.err)
	}
}

type blocker struct{}

func (blocker) Name() string { return "block-word" }
func (blocker) Check(_ context.Context, r *stage.Request) (stage.Decision, error) {
	for i, m := range r.Body.Messages {
		txt := m.Text()
		if strings.Contains(txt, "forbidden") {
			return stage.Decision{Action: stage.Block, Reason: "contains a forbidden word"}, nil
		}
		if strings.Contains(txt, "555-1234") {
			_ = r.Body.SetMessageText(i, strings.ReplaceAll(txt, "555-1234", "[PHONE]"))
			return stage.Decision{Action: stage.Redact}, nil
		}
	}
	return stage.Decision{Action: stage.Flag, Reason: "seen"}, nil
}

// redactor replaces "SECRET" in responses even when it is split across chunks, holding back at
// most len("SECRET")-1 bytes.
type redactor struct{}

func (redactor) Name() string { return "secret" }
func (redactor) NewStream(context.Context, *stage.Request) stage.StreamFilter {
	return &redactStream{held: map[int]string{}}
}

type redactStream struct{ held map[int]string }

func (r *redactStream) Write(c int, s string) (string, error) {
	s = strings.ReplaceAll(r.held[c]+s, "SECRET", "******")
	keep := min(len("SECRET")-1, len(s))
	r.held[c] = s[len(s)-keep:]
	return s[:len(s)-keep], nil
}
func (r *redactStream) Close(c int) (string, error) { s := r.held[c]; delete(r.held, c); return s, nil }
func (r *redactStream) Blocked() (string, bool)     { return "", false }

type observer struct {
	mu  sync.Mutex
	out []stage.Outcome
}

func (o *observer) Observe(_ *stage.Request, out stage.Outcome) {
	o.mu.Lock()
	o.out = append(o.out, out)
	o.mu.Unlock()
}

func TestStagesAndFilters(t *testing.T) {
	b := newBackend(t)
	h := newHarness(t, b)
	obs := &observer{}
	h.e.Ext.Stages = []stage.RequestStage{blocker{}}
	h.e.Ext.Filters = []stage.ChunkFilter{redactor{}}
	h.e.Ext.Observers = []stage.Observer{obs}

	// A blocked request is answered as OpenAI answers a filtered completion (200, finish_reason
	// content_filter, no text); nothing reaches the backend.
	s := h.do(context.Background(), anyone, nil, `{"model":"m","stream":true,"messages":[{"role":"user","content":"a forbidden thing"}]}`)
	if s.err != nil || !s.finished || len(s.events) != 1 || !strings.Contains(s.events[0], `"finish_reason":"content_filter"`) || b.count() != 0 {
		t.Fatalf("block: %v %q (backend calls %d)", s.err, s.events, b.count())
	}
	s = h.do(context.Background(), anyone, nil, `{"model":"m","stream":true,"messages":[{"role":"user","content":"call 555-1234"}]}`)
	if s.err != nil {
		t.Fatal(s.err)
	}
	msgs := b.last().body["messages"].([]any)
	if got := msgs[0].(map[string]any)["content"]; got != "call [PHONE]" {
		t.Fatalf("backend got %q, want the redacted message", got)
	}
	// The backend streams "the SEC" + "RET is" + "SECRET": every occurrence is masked.
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, p := range []string{"the SEC", "RET is ", "SECRET"} {
			fin := ""
			if i == 2 {
				fin = "stop"
			}
			w.Write([]byte("data: " + chunkJSON(p, fin) + "\n\n"))
		}
		w.Write([]byte("data: [DONE]\n\n"))
	})
	s = h.do(context.Background(), anyone, nil, chat(true, ""))
	if got := s.text(); got != "the ****** is ******" {
		t.Fatalf("streamed %q", got)
	}
	b.set(streamTokens(1, 0))
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Write([]byte(`{"id":"x","object":"chat.completion","model":"m","extra":1,"choices":[{"index":0,"message":{"role":"assistant","content":"a SECRET b"},"finish_reason":"stop"}]}`))
	})
	s = h.do(context.Background(), anyone, nil, chat(false, ""))
	if !strings.Contains(s.body, `"a ****** b"`) || !strings.Contains(s.body, `"extra":1`) {
		t.Fatalf("whole response %s", s.body)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.out) != 4 || obs.out[0].Status != 200 || obs.out[2].TTFT <= 0 || obs.out[2].Pod != b.name || len(obs.out[3].Flags) != 1 {
		t.Fatalf("outcomes %+v", obs.out)
	}
	if v := testutil.ToFloat64(h.e.Metrics.Stages.WithLabelValues("block-word", "redact")); v != 1 {
		t.Fatalf("redact decisions %v", v)
	}
}

// canary selects the (scoped) session key key; mirror copies every request to the shadow pool.
type canary struct {
	to  route.PoolRef
	key string
}

func (c canary) Select(_ context.Context, r *stage.Request) (route.PoolRef, error) {
	if r.SessionKey == c.key {
		return c.to, nil
	}
	return r.Candidates[0].Pool, nil
}

type mirror struct {
	to   route.PoolRef
	done chan stage.Outcome
}

func (m mirror) Shadows(_ context.Context, r *stage.Request) []stage.Shadow {
	body := r.Body.Clone()
	body.Set("tools", nil)
	return []stage.Shadow{{Pool: m.to, Body: body, Done: func(o stage.Outcome) { m.done <- o }}}
}

func TestSelectorAndMirror(t *testing.T) {
	stable, canaryB, shadowB := newBackend(t), newBackend(t), newBackend(t)
	h := newHarness(t, stable)
	mk := func(name string, b *backend) *route.Pool {
		return &route.Pool{Ref: route.PoolRef{Namespace: "ns", Name: name}, Model: "m", AgentClass: name, Policy: route.DefaultPolicy(),
			Endpoints: []route.Endpoint{{Pod: b.name, Addr: b.name}}}
	}
	canaryPool, shadowPool := mk("pool-canary", canaryB), mk("shadow", shadowB)
	shadowPool.Model = "shadow-model"
	h.e.Table.Store(route.NewSnapshot([]*route.Pool{h.pool, canaryPool, shadowPool}))
	done := make(chan stage.Outcome, 4)
	h.e.Ext.Selector = canary{canaryPool.Ref, scopedKey(h.e, anyone, "canary-1")}
	h.e.Ext.Mirrors = []stage.Mirror{mirror{shadowPool.Ref, done}}

	s := h.do(context.Background(), anyone, map[string]string{"X-Session-Id": "canary-1"}, chat(true, `,"tools":[{"type":"function"}]`))
	if s.err != nil || s.meta.Pool != "ns/pool-canary" || canaryB.count() != 1 {
		t.Fatalf("canary: %v %+v", s.err, s.meta)
	}
	o := <-done
	if !o.Shadow || o.Err != "" || o.Pod != shadowB.name {
		t.Fatalf("shadow outcome %+v", o)
	}
	if _, has := shadowB.last().body["tools"]; has {
		t.Fatal("shadow copy kept its tools")
	}
	if _, has := canaryB.last().body["tools"]; !has {
		t.Fatal("the client's request lost its tools")
	}
	s = h.do(context.Background(), anyone, map[string]string{"X-Session-Id": "user-1"}, chat(true, ""))
	if s.meta.Pool != "ns/pool" || stable.count() != 1 {
		t.Fatalf("stable: %+v", s.meta)
	}
	<-done
	raw, _ := json.Marshal(shadowB.last().body)
	if shadowB.count() != 2 || !strings.Contains(string(raw), `"stream":true`) {
		t.Fatalf("shadow calls %d body %s", shadowB.count(), raw)
	}
}

func TestCarriesToken(t *testing.T) {
	for _, tc := range []struct {
		data string
		want bool
	}{
		{`{"choices":[{"delta":{"content":"a"}}]}`, true},
		{`{"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`, false},
		{`{"choices":[{"delta":{"role":"assistant"}}]}`, false},
		{`{"choices":[{"text":" x","index":0}]}`, true},
		{`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, true},
		{`{"choices":[{"delta":{"tool_calls":[]}}]}`, false},
		{`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`, false},
		{`{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, true},
		{`{"choices":[{"delta":{"reasoning":"hm"}}]}`, true},
		{`{"choices":[{"delta":{"content":"\"quoted\""}}]}`, true},
		{`{"choices":[{"delta":{"content":""}}],"note":"\"content\":\"x\""}`, false},
	} {
		if got := carriesToken([]byte(tc.data)); got != tc.want {
			t.Errorf("carriesToken(%s) = %v", tc.data, got)
		}
	}
}

// TestAnonymousNamespace: without authentication in Kubernetes mode the anonymous caller reaches
// the pools of its one namespace and no other's.
func TestAnonymousNamespace(t *testing.T) {
	for _, tc := range []struct {
		ns     string
		status int
	}{{"ns", 0}, {"other", 404}, {"", 404}} {
		t.Run("namespace "+tc.ns, func(t *testing.T) {
			b := newBackend(t)
			h := newHarness(t, b)
			h.e.Anonymous = access.AnonymousIn(tc.ns)
			s := h.do(context.Background(), nil, nil, chat(false, ""))
			status := 0
			if s.err != nil {
				status = s.err.Status
			}
			if status != tc.status || (status == 0) != (b.count() == 1) {
				t.Fatalf("status %d (%v), backend calls %d; want %d", status, s.err, b.count(), tc.status)
			}
		})
	}
}

// TestInvalidSessionKey: a session key with a control character or invalid UTF-8 is a 400 that
// names where it came from, and reaches no pod.
func TestInvalidSessionKey(t *testing.T) {
	b := newBackend(t)
	h := newHarness(t, b)
	for _, tc := range []struct {
		name, extra, param string
	}{
		{"control character", `,"conversation_id":"a\u0007b"`, "conversation_id"},
		{"C1 control", `,"user":"a\u0085b"`, "user"},
		{"NUL", `,"conversation_id":"\u0000"`, "conversation_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := h.do(context.Background(), anyone, nil, chat(false, tc.extra))
			if s.err == nil || s.err.Status != 400 || s.err.Body.Param == nil || *s.err.Body.Param != tc.param {
				t.Fatalf("err %v, want 400 naming %s", s.err, tc.param)
			}
		})
	}
	if b.count() != 0 {
		t.Fatalf("%d requests with invalid keys reached the pod", b.count())
	}
	if s := h.do(context.Background(), anyone, nil, chat(false, `,"conversation_id":"ünïcode-ok 42"`)); s.err != nil {
		t.Fatalf("a printable key was refused: %v", s.err)
	}
}
