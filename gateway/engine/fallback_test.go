package engine

import (
	"context"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// TestCostFallback: with the controller's fallback on a pool, new conversations go to the
// fallback pool (its model reported in X-Neuronetes-Model and the tokens' model label) keeping
// their session key; pinned ones stay until the scope is AllSessions; a fallback pool with no
// ready endpoint is not used.
func TestCostFallback(t *testing.T) {
	for _, tc := range []struct {
		name       string
		all        bool
		pinned     bool
		smallReady bool
		wantSmall  bool
	}{
		{"new conversation, NewSessions", false, false, true, true},
		{"pinned conversation, NewSessions", false, true, true, false},
		{"pinned conversation, AllSessions", true, true, true, true},
		{"fallback without endpoints", true, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			big, small := newBackend(t), newBackend(t)
			h := newHarness(t, big)
			smallRef := route.PoolRef{Namespace: "ns", Name: "small"}
			h.pool.Fallback = &route.Fallback{Pool: smallRef, AllSessions: tc.all, Reason: "CostThreshold"}
			sp := &route.Pool{Ref: smallRef, AgentClass: "small-cls", Model: "m-small", Policy: route.DefaultPolicy()}
			if tc.smallReady {
				sp.Endpoints = []route.Endpoint{{Pod: small.name, Addr: small.name}}
			}
			h.e.Table.Store(route.NewSnapshot([]*route.Pool{h.pool, sp}))
			hdr := map[string]string{"X-Session-Id": "conv-1"}
			if tc.pinned {
				h.e.Pins.Pin(context.Background(), h.pool.Ref, scopedKey(h.e, anyone, "conv-1"), big.name, time.Minute)
			}
			s := h.do(context.Background(), anyone, hdr, chat(false, ""))
			if s.err != nil {
				t.Fatal(s.err)
			}
			want, model := big, "m"
			if tc.wantSmall {
				want, model = small, "m-small"
			}
			if want.count() != 1 || s.meta.Pod != want.name || s.meta.Model != model {
				t.Fatalf("served by %s (model %q), want %s (%s)", s.meta.Pod, s.meta.Model, want.name, model)
			}
			if tc.wantSmall && want.last().header.Get(HeaderSession) != scopedKey(h.e, anyone, "conv-1") {
				t.Fatal("the fallback pool did not get the conversation's session key")
			}
		})
	}
}
