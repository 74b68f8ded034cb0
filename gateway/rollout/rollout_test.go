package rollout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/stage"
	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func view(phase nnv1.RolloutPhase, weight, mirror int32, step string) *View {
	return &View{Namespace: "ns", Name: "chat", UID: "uid-1", Stable: "v1", Canary: "v2", Phase: phase,
		Weight: weight, Mirror: mirror, StepID: step, Run: 1}
}

func request(id, session string) *stage.Request {
	body, err := openai.Parse(openai.RouteChat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		panic(err)
	}
	return &stage.Request{ID: id, Tenant: "ns/acme", Model: "m", SessionKey: session, Header: http.Header{}, Body: body,
		Candidates: []stage.Candidate{{Pool: stage.PoolRef{Namespace: "ns", Name: "v1"}, Ready: 1}, {Pool: stage.PoolRef{Namespace: "ns", Name: "v2"}, Ready: 1}}}
}

func newSplitter(v *View, st Store) (*Splitter, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	t := NewTable(nil)
	t.Upsert(v)
	return &Splitter{Table: t, Store: st, Recorder: NewRecorder(reg)}, reg
}

// TestConversationsNeverFlip raises the canary weight step by step (5 -> 25 -> 50 -> 100) with
// 2000 conversations taking turns, and checks that no conversation changes variant, while the
// share of new conversations on the canary follows each step's weight.
func TestConversationsNeverFlip(t *testing.T) {
	for _, storeName := range []string{"memory", "redis"} {
		t.Run(storeName, func(t *testing.T) {
			var st Store = NewMemoryStore(time.Hour, 0)
			if storeName == "redis" {
				srv := redistest.Start(t, redistest.Options{})
				st = &RedisStore{Client: redis.NewClient(&redis.Options{Addr: srv.Addr}), TTL: time.Hour}
			}
			v := view(nnv1.RolloutProgressing, 5, 0, "1-0")
			s, _ := newSplitter(v, st)
			first := map[string]string{}
			id := 0
			for step, w := range []int32{5, 25, 50, 100} {
				nv := *v
				nv.Weight, nv.StepID = w, fmt.Sprintf("1-%d", step)
				if w == 100 {
					nv.Phase = nnv1.RolloutPromoted
				}
				s.Table.Upsert(&nv)
				newOnCanary, newTotal := 0, 0
				for c := 0; c < 2000; c++ {
					conv := fmt.Sprintf("conv-%d", c)
					if step > 0 && c%2 == 1 {
						conv = fmt.Sprintf("conv-%d-s%d", c, step) // half the traffic is new conversations
					}
					id++
					req := request(fmt.Sprint(id), conv)
					p, err := s.Select(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					s.Observe(req, stage.Outcome{Status: 200, TTFT: 10 * time.Millisecond})
					if prev, ok := first[conv]; ok {
						if prev != p.Name {
							t.Fatalf("step %d: conversation %s flipped %s -> %s", step, conv, prev, p.Name)
						}
						continue
					}
					first[conv] = p.Name
					newTotal++
					if p.Name == "v2" {
						newOnCanary++
					}
				}
				share := float64(newOnCanary) / float64(newTotal)
				if d := share - float64(w)/100; d > 0.05 || d < -0.05 {
					t.Fatalf("step %d weight %d: %.3f of new conversations on the canary", step, w, share)
				}
			}
		})
	}
}

func TestRollbackSendsEverythingToStable(t *testing.T) {
	v := view(nnv1.RolloutProgressing, 50, 0, "1-0")
	s, _ := newSplitter(v, NewMemoryStore(time.Hour, 0))
	onCanary := []string{}
	for c := 0; c < 200; c++ {
		conv := fmt.Sprint("c", c)
		if p, _ := s.Select(context.Background(), request(conv, conv)); p.Name == "v2" {
			onCanary = append(onCanary, conv)
		}
	}
	if len(onCanary) == 0 {
		t.Fatal("no conversation on the canary at weight 50")
	}
	rb := *v
	rb.Phase, rb.Weight = nnv1.RolloutRolledBack, 0
	s.Table.Upsert(&rb)
	for _, conv := range append(onCanary, "brand-new") {
		if p, _ := s.Select(context.Background(), request(conv+"x", conv)); p.Name != "v1" {
			t.Fatalf("after rollback %s went to %s", conv, p.Name)
		}
	}
}

func TestMatchRules(t *testing.T) {
	classifier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"label":"code"}`))
	}))
	defer classifier.Close()
	m, err := NewMatcher("ns", &nnv1.RolloutMatch{
		Headers:    []nnv1.HeaderValuesMatch{{Name: "X-Channel", Values: []string{"beta"}}},
		Tenants:    []string{"acme"},
		Classifier: &nnv1.PromptClassifier{URL: classifier.URL, Labels: []string{"code"}},
	}, NewClassifierClient(egress.AllowLoopback()))
	if err != nil {
		t.Fatal(err)
	}
	prompt := func() string { return "write a function" }
	cases := []struct {
		tenant string
		h      http.Header
		want   bool
	}{
		{"ns/acme", http.Header{"X-Channel": {"beta"}}, true},
		{"ns/acme", http.Header{"X-Channel": {"stable"}}, false},
		{"ns/acme", http.Header{}, false},
		{"ns/other", http.Header{"X-Channel": {"beta"}}, false},
	}
	for _, c := range cases {
		if got := m.Matches(context.Background(), c.tenant, c.h, prompt); got != c.want {
			t.Errorf("Matches(%s, %v) = %v", c.tenant, c.h, got)
		}
	}
	m.classifier.Labels = map[string]bool{"support": true}
	if m.Matches(context.Background(), "ns/acme", http.Header{"X-Channel": {"beta"}}, prompt) {
		t.Error("a label outside the list must not take part")
	}
	m.classifier.URL = "http://127.0.0.1:1" // unreachable: the request stays on stable
	if m.Matches(context.Background(), "ns/acme", http.Header{"X-Channel": {"beta"}}, prompt) {
		t.Error("a failed classifier call must not take part")
	}
}

func TestNonMatchingRequestsStayStable(t *testing.T) {
	v := view(nnv1.RolloutProgressing, 100, 0, "1-0")
	v.Phase = nnv1.RolloutProgressing
	v.Match, _ = NewMatcher("ns", &nnv1.RolloutMatch{Headers: []nnv1.HeaderValuesMatch{{Name: "X-Beta"}}}, nil)
	s, _ := newSplitter(v, NewMemoryStore(time.Hour, 0))
	req := request("1", "conv")
	if p, _ := s.Select(context.Background(), req); p.Name != "v1" {
		t.Fatalf("non-matching request went to %s", p.Name)
	}
	req = request("2", "conv2")
	req.Header.Set("X-Beta", "1")
	if p, _ := s.Select(context.Background(), req); p.Name != "v2" {
		t.Fatalf("matching request at weight 100 went to %s", p.Name)
	}
}

func TestShadowsAndSamples(t *testing.T) {
	v := view(nnv1.RolloutProgressing, 0, 30, "1-0")
	s, reg := newSplitter(v, NewMemoryStore(time.Hour, 0))
	shadows := 0
	for i := 0; i < 1000; i++ {
		req := request(fmt.Sprint("r", i), fmt.Sprint("c", i))
		p, _ := s.Select(context.Background(), req)
		if p.Name != "v1" {
			t.Fatal("weight 0 sends nothing live to the canary")
		}
		for _, sh := range s.Shadows(context.Background(), req) {
			shadows++
			if sh.Pool.Name != "v2" {
				t.Fatalf("shadow to %s", sh.Pool.Name)
			}
			if !strings.Contains(string(sh.Body.Field("metadata")), `"neuronetes_shadow":"true"`) {
				t.Fatalf("shadow body lacks the marker: %s", sh.Body.Field("metadata"))
			}
			if req.Body.Field("metadata") != nil {
				t.Fatal("the client's body must not change")
			}
			sh.Done(stage.Outcome{Status: 200, TTFT: 20 * time.Millisecond, Shadow: true, ToolCalls: 1})
		}
		s.Observe(req, stage.Outcome{Status: 200, TTFT: 10 * time.Millisecond})
	}
	if shadows < 250 || shadows > 350 {
		t.Fatalf("%d of 1000 requests mirrored at 30%%", shadows)
	}
	r := s.Recorder
	if got := testutil.ToFloat64(r.Requests.WithLabelValues("ns", "chat", "1-0", "canary", "shadow", "ok")); int(got) != shadows {
		t.Fatalf("shadow samples %v, want %d", got, shadows)
	}
	if got := testutil.ToFloat64(r.Requests.WithLabelValues("ns", "chat", "1-0", "stable", "live", "ok")); got != 1000 {
		t.Fatalf("stable samples %v", got)
	}
	if got := testutil.ToFloat64(r.ShadowToolCalls.WithLabelValues("ns", "chat")); int(got) != shadows {
		t.Fatalf("suppressed tool calls %v", got)
	}
	s.Table.onStep = func(v *View, old string) { s.Recorder.Forget(v, old) }
	nv := *v
	nv.StepID = "1-1"
	s.Table.Upsert(&nv)
	if n, _ := testutil.GatherAndCount(reg, "neuronetes_rollout_requests_total"); n != 0 {
		t.Fatalf("%d series of the old step remain", n)
	}
}

func TestErrorsAndBlockedRequestsAreAttributed(t *testing.T) {
	v := view(nnv1.RolloutProgressing, 50, 0, "1-0")
	s, _ := newSplitter(v, NewMemoryStore(time.Hour, 0))
	for i := 0; i < 200; i++ {
		req := request(fmt.Sprint("r", i), fmt.Sprint("c", i))
		if i%2 == 0 {
			// blocked by a guardrail before routing: Observe without Select
			s.Observe(req, stage.Outcome{Status: 400, Flags: []string{"guardrails:block"}})
			continue
		}
		s.Select(context.Background(), req)
		s.Observe(req, stage.Outcome{Status: 500, Err: "boom"})
	}
	r := s.Recorder
	safety := testutil.ToFloat64(r.Safety.WithLabelValues("ns", "chat", "1-0", "stable", "live")) +
		testutil.ToFloat64(r.Safety.WithLabelValues("ns", "chat", "1-0", "canary", "live"))
	errs := testutil.ToFloat64(r.Requests.WithLabelValues("ns", "chat", "1-0", "stable", "live", "error")) +
		testutil.ToFloat64(r.Requests.WithLabelValues("ns", "chat", "1-0", "canary", "live", "error"))
	if safety != 100 || errs != 100 {
		t.Fatalf("safety %v errors %v", safety, errs)
	}
}

// TestPauseAndEditKeepAssignments: a new spec generation in the same run (a pause, then an edit
// that lowers the weight) keeps every live conversation's variant; a new run assigns afresh.
func TestPauseAndEditKeepAssignments(t *testing.T) {
	ro := &nnv1.AgentRollout{Spec: nnv1.AgentRolloutSpec{StablePool: nnv1.LocalObjectReference{Name: "v1"},
		CanaryPool: nnv1.LocalObjectReference{Name: "v2"}}}
	ro.Namespace, ro.Name, ro.UID = "ns", "chat", "uid-1"
	ro.Status = nnv1.AgentRolloutStatus{ObservedGeneration: 1, Run: 1, Phase: nnv1.RolloutProgressing, CanaryWeight: 50, StepID: "1-1"}
	s, _ := newSplitter(ViewOf(ro, nil), NewMemoryStore(time.Hour, 0))
	first := map[string]string{}
	for c := 0; c < 400; c++ {
		p, _ := s.Select(context.Background(), request(fmt.Sprint("a", c), fmt.Sprint("conv-", c)))
		first[fmt.Sprint("conv-", c)] = p.Name
	}
	for _, st := range []nnv1.AgentRolloutStatus{
		{ObservedGeneration: 2, Run: 1, Phase: nnv1.RolloutPaused, CanaryWeight: 50, StepID: "1-1"},
		{ObservedGeneration: 3, Run: 1, Phase: nnv1.RolloutProgressing, CanaryWeight: 10, StepID: "3-1"},
	} {
		ro.Status = st
		s.Table.Upsert(ViewOf(ro, nil))
		for c := 0; c < 400; c++ {
			conv := fmt.Sprint("conv-", c)
			if p, _ := s.Select(context.Background(), request(fmt.Sprint("b", c), conv)); p.Name != first[conv] {
				t.Fatalf("generation %d: %s moved from %s to %s", st.ObservedGeneration, conv, first[conv], p.Name)
			}
		}
	}
	ro.Status = nnv1.AgentRolloutStatus{ObservedGeneration: 4, Run: 2, Phase: nnv1.RolloutProgressing, CanaryWeight: 0, StepID: "4-0"}
	s.Table.Upsert(ViewOf(ro, nil))
	for c := 0; c < 400; c++ {
		if p, _ := s.Select(context.Background(), request(fmt.Sprint("c", c), fmt.Sprint("conv-", c))); p.Name != "v1" {
			t.Fatalf("a new run at weight 0 kept conv-%d on %s", c, p.Name)
		}
	}
}

// TestPromotionDrainsOldPool: after a promotion conversations assigned to the stable pool
// finish there while new ones go to the canary; once the rollout is drained every request, of
// every conversation, goes to the canary.
func TestPromotionDrainsOldPool(t *testing.T) {
	v := view(nnv1.RolloutProgressing, 50, 0, "1-1")
	s, _ := newSplitter(v, NewMemoryStore(time.Hour, 0))
	var onStable []string
	for c := 0; c < 200; c++ {
		conv := fmt.Sprint("conv-", c)
		if p, _ := s.Select(context.Background(), request(fmt.Sprint("a", c), conv)); p.Name == "v1" {
			onStable = append(onStable, conv)
		}
	}
	if len(onStable) == 0 {
		t.Fatal("no conversation on stable at weight 50")
	}
	promoted := *v
	promoted.Phase, promoted.Weight, promoted.StepID = nnv1.RolloutPromoted, 100, "1-2"
	s.Table.Upsert(&promoted)
	for _, conv := range onStable {
		if p, _ := s.Select(context.Background(), request("b"+conv, conv)); p.Name != "v1" {
			t.Fatalf("promoted, not drained: %s left the stable pool", conv)
		}
	}
	if p, _ := s.Select(context.Background(), request("new", "conv-new")); p.Name != "v2" {
		t.Fatalf("a new conversation after promotion went to %s", p.Name)
	}
	drained := promoted
	drained.Drained = true
	s.Table.Upsert(&drained)
	for _, conv := range onStable {
		if p, _ := s.Select(context.Background(), request("c"+conv, conv)); p.Name != "v2" {
			t.Fatalf("drained: %s still on %s", conv, p.Name)
		}
	}
}

// TestShadowCopyKeepsEveryField checks the canary's copy of a tool conversation is the client's
// body byte for byte but for the marker added to metadata (merged with the client's own).
func TestShadowCopyKeepsEveryField(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":[{"type":"text","text":"mail"},{"type":"image_url","image_url":{"url":"https://x/i.png"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"send","arguments":"{\"to\":\"a\u00e9\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","name":"send","content":"ok"}],"temperature":1.0e0,"tools":[{"type":"function","function":{"name":"send"}}]`
	for _, tc := range []struct{ name, body, want string }{
		{"no metadata", `{"model":"m",` + msgs + `}`, `{"model":"m",` + msgs + `,"metadata":{"neuronetes_shadow":"true"}}`},
		{"metadata", `{"model":"m","metadata":{ "k" : "v\u00e9" },` + msgs + `}`, `{"model":"m","metadata":{ "k" : "v\u00e9","neuronetes_shadow":"true" },` + msgs + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := view(nnv1.RolloutProgressing, 0, 100, "1-0")
			s, _ := newSplitter(v, NewMemoryStore(time.Hour, 0))
			req := request("r", "c")
			body, err := openai.Parse(openai.RouteChat, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Body = body
			if _, err := s.Select(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			shs := s.Shadows(context.Background(), req)
			if len(shs) != 1 {
				t.Fatalf("%d shadows", len(shs))
			}
			got, err := shs[0].Body.Body()
			if err != nil || string(got) != tc.want {
				t.Fatalf("shadow body\n got %s (%v)\nwant %s", got, err, tc.want)
			}
			if orig, _ := req.Body.Body(); string(orig) != tc.body {
				t.Fatalf("the client's body changed: %s", orig)
			}
		})
	}
}
