package engine

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/sessionkey"
	"github.com/neuronetes/neuronetes/gateway/stage"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// Session keys are scoped by tenant: another tenant sending a victim's conversation id (or user
// id) is neither pinned to the victim's pod nor sent the victim's conversation id, while the
// victim's own turns stay pinned across replicas that share the pin table and the secret.
func TestSessionKeysScopedByTenant(t *testing.T) {
	bs := []*backend{newBackend(t), newBackend(t), newBackend(t)}
	replica1, replica2 := newHarness(t, bs...), newHarness(t, bs...)
	secret, _ := sessionkey.New(bytes.Repeat([]byte("s"), sessionkey.MinSecretBytes))
	replica1.e.Sessions, replica2.e.Sessions = secret, secret
	replica2.e.Pins = replica1.e.Pins // the shared (Redis) table
	victim, attacker := tenant("victim", access.Quota{}), tenant("attacker", access.Quota{})
	seenBy := func(pod string) string {
		for _, b := range bs {
			if b.name == pod {
				return b.last().header.Get(HeaderConversation)
			}
		}
		return ""
	}
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		body string
	}{
		{"conversation header", map[string]string{"X-Conversation-Id": "conv-victim"}, chat(true, "")},
		{"body user", nil, chat(true, `,"user":"alice@example.com"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v1 := replica1.do(context.Background(), victim, tc.hdr, tc.body)
			v2 := replica2.do(context.Background(), victim, tc.hdr, tc.body)
			if v1.err != nil || v2.err != nil || v1.meta.Pin != PinNew || v2.meta.Pin != PinHeld || v2.meta.Pod != v1.meta.Pod {
				t.Fatalf("victim's turns: %+v (%v) then %+v (%v)", v1.meta, v1.err, v2.meta, v2.err)
			}
			victimConv := seenBy(v1.meta.Pod)
			a := replica1.do(context.Background(), attacker, tc.hdr, tc.body)
			if a.err != nil || a.meta.Pin != PinNew {
				t.Fatalf("attacker's request with the victim's key: %+v (%v), want a new pin", a.meta, a.err)
			}
			attackerConv := seenBy(a.meta.Pod)
			if attackerConv == victimConv || attackerConv == "" {
				t.Fatalf("attacker's pod got conversation %q, the victim's is %q", attackerConv, victimConv)
			}
			for _, raw := range []string{"conv-victim", "alice@example.com"} {
				if victimConv == raw || attackerConv == raw {
					t.Fatalf("the client's raw key %q reached the pod", raw)
				}
			}
			// The victim's pin is unchanged by the attacker's request.
			if v3 := replica2.do(context.Background(), victim, tc.hdr, tc.body); v3.meta.Pin != PinHeld || v3.meta.Pod != v1.meta.Pod {
				t.Fatalf("victim's third turn %+v, want held on %s", v3.meta, v1.meta.Pod)
			}
		})
	}
}

// The identity fields of the body (user, conversation_id, the metadata values the policy reads
// keys from) reach the pod only in the tenant's scoped form: an agent that reads the body instead
// of the X-Conversation-Id header finds the scoped conversation, never the raw id, and another
// tenant naming the victim's ids in the body reaches other conversations.
func TestBodyIdentityFieldsScopedByTenant(t *testing.T) {
	b := newBackend(t)
	h := newHarness(t, b)
	secret, _ := sessionkey.New(bytes.Repeat([]byte("s"), sessionkey.MinSecretBytes))
	h.e.Sessions = secret
	victim, attacker := tenant("victim", access.Quota{}), tenant("attacker", access.Quota{})
	body := chat(false, `,"conversation_id":" conv-victim ","user":"alice@example.com","metadata":{"conversation_id":"conv-victim","app":"x"}`)
	fields := func(tn *access.Tenant) (header string, got map[string]any) {
		t.Helper()
		if s := h.do(context.Background(), tn, nil, body); s.err != nil {
			t.Fatalf("request: %v", s.err)
		}
		last := b.last()
		md, _ := last.body["metadata"].(map[string]any)
		return last.header.Get(HeaderConversation), map[string]any{"conversation_id": last.body["conversation_id"],
			"user": last.body["user"], "metadata.conversation_id": md["conversation_id"], "metadata.app": md["app"]}
	}
	vh, v := fields(victim)
	ah, a := fields(attacker)
	if v["conversation_id"] != vh || v["metadata.conversation_id"] != vh {
		t.Fatalf("victim's body ids %v, want both equal to the header's key %q", v, vh)
	}
	if v["user"] != secret.Scope(victim, "alice@example.com") || v["metadata.app"] != "x" {
		t.Fatalf("victim's body %v: user not scoped or metadata.app changed", v)
	}
	for _, f := range []string{"conversation_id", "user", "metadata.conversation_id"} {
		if v[f] == a[f] {
			t.Errorf("%s is %v for both tenants", f, v[f])
		}
		for _, raw := range []string{"conv-victim", " conv-victim ", "alice@example.com"} {
			if v[f] == raw || a[f] == raw {
				t.Errorf("the raw %s %q reached the pod", f, raw)
			}
		}
	}
	if ah == vh {
		t.Fatalf("both tenants got conversation %q", vh)
	}
}

// A body spelling messages (or model) twice is refused before any check or model access: the
// guard would read one spelling and the model server the other.
func TestCaseVariantKeysDoNotBypassChecks(t *testing.T) {
	b := newBackend(t)
	h := newHarness(t, b)
	h.e.Ext.Stages = []stage.RequestStage{blocker{}}
	h.e.Cfg.BlockedAsError = true            // a block is a 400 here, told apart from a pass by its status
	only := tenant("only-m", access.Quota{}) // may use model "m" only
	forbidden := `[{"role":"user","content":"forbidden words"}]`
	benign := `[{"role":"user","content":"hello"}]`
	for _, tc := range []struct {
		name, body, param string
		status            int
	}{
		{"plain attack is blocked", `{"model":"m","messages":` + forbidden + `}`, "", 400},
		{"messages attack, Messages benign", `{"model":"m","messages":` + forbidden + `,"Messages":` + benign + `}`, "messages", 400},
		{"Messages benign first", `{"model":"m","Messages":` + benign + `,"messages":` + forbidden + `}`, "messages", 400},
		{"model allowed, Model not", `{"model":"m","Model":"other","messages":` + benign + `}`, "model", 400},
		{"Model not, model allowed", `{"Model":"other","model":"m","messages":` + benign + `}`, "model", 400},
		{"plain other model is not found", `{"model":"other","messages":` + benign + `}`, "model", 404},
		{"ordinary body", `{"model":"m","messages":` + benign + `}`, "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.count()
			s := h.do(context.Background(), only, nil, tc.body)
			status := 200
			if s.err != nil {
				status = s.err.Status
			}
			param := ""
			if s.err != nil && s.err.Body.Param != nil {
				param = *s.err.Body.Param
			}
			if status != tc.status || param != tc.param {
				t.Fatalf("status %d param %q (%v), want %d naming %q", status, param, s.err, tc.status, tc.param)
			}
			if sent := b.count() - before; (status == 200) != (sent == 1) {
				t.Fatalf("backend got %d requests for status %d", sent, status)
			}
		})
	}
}

// keyRecorder is a request stage that records the session key every stage (and the variant
// selector after it) sees.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (*keyRecorder) Name() string { return "record" }
func (k *keyRecorder) Check(_ context.Context, r *stage.Request) (stage.Decision, error) {
	k.mu.Lock()
	k.keys = append(k.keys, r.SessionKey)
	k.mu.Unlock()
	return stage.Decision{}, nil
}

// Replicas sharing Redis agree on a tenant's pins, keep another tenant's apart, and store no
// raw session key (conversation or user id) in Redis; stages see only scoped keys.
func TestNoRawSessionKeyInRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	bs := []*backend{newBackend(t), newBackend(t)}
	secret, _ := sessionkey.New(bytes.Repeat([]byte("r"), sessionkey.MinSecretBytes))
	rec := &keyRecorder{}
	var replicas []*harness
	for range 2 {
		h := newHarness(t, bs...)
		h.e.Sessions = secret
		h.e.Pins = &affinity.Store{Mem: affinity.NewMemory(0, nil), Redis: affinity.NewRedisTable(rc, "gw:"), Timeout: time.Second}
		h.e.Ext.Stages = []stage.RequestStage{rec}
		replicas = append(replicas, h)
	}
	victim, attacker := tenant("victim", access.Quota{}), tenant("attacker", access.Quota{})
	ctx := context.Background()
	conv := map[string]string{"X-Conversation-Id": "conv-victim"}
	user := chat(false, `,"user":"alice@example.com"`)
	v1 := replicas[0].do(ctx, victim, conv, chat(false, ""))
	v2 := replicas[1].do(ctx, victim, conv, chat(false, ""))
	replicas[0].do(ctx, victim, nil, user)
	a := replicas[1].do(ctx, attacker, conv, chat(false, ""))
	replicas[1].do(ctx, attacker, nil, user)
	if v1.meta.Pin != PinNew || v2.meta.Pin != PinHeld || v2.meta.Pod != v1.meta.Pod || a.meta.Pin != PinNew {
		t.Fatalf("victim %+v then %+v; attacker %+v", v1.meta, v2.meta, a.meta)
	}
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("redis keys %v %v", keys, err)
	}
	for _, k := range keys {
		var vals []string
		switch typ, _ := rc.Type(ctx, k).Result(); typ {
		case "string":
			vals = []string{rc.Get(ctx, k).Val()}
		case "zset":
			vals = rc.ZRange(ctx, k, 0, -1).Val()
		}
		for _, v := range append(vals, k) {
			if strings.Contains(v, "conv-victim") || strings.Contains(v, "alice") {
				t.Errorf("redis %s holds a raw session key: %q", k, v)
			}
		}
	}
	want := []string{secret.Scope(victim, "conv-victim"), secret.Scope(victim, "alice@example.com"),
		secret.Scope(attacker, "conv-victim"), secret.Scope(attacker, "alice@example.com")}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := []string{rec.keys[0], rec.keys[2], rec.keys[3], rec.keys[4]}; !slices.Equal(got, want) || rec.keys[1] != rec.keys[0] {
		t.Fatalf("stages saw %q, want %q", rec.keys, want)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(want)))) != 4 {
		t.Fatalf("scoped keys collide: %q", want)
	}
}
