package e2e

// Tenant isolation of conversations through the gateway (docs/gateway.md, "Session keys"): the
// gateway runs as a host process over a fresh namespace with two Tenants; each attack comes from
// the second tenant, or from a body crafted to be read two ways.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// intruderAPIKey is the API key of the second Tenant of an attack namespace.
const intruderAPIKey = "nn-e2e-intruder-key"

// addIntruder creates a second Tenant in ns (every model allowed) and returns g as that tenant,
// once the gateway knows its key.
func addIntruder(t *testing.T, e *Env, ns string, g *gwProc) *gwProc {
	t.Helper()
	e.Apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: intruder-keys
  labels: {neuronetes.io/api-keys: "true"}
stringData: {key1: %s}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: intruder}
spec:
  apiKeys: [{secretName: intruder-keys}]
  models: ["*"]
`, intruderAPIKey))
	in := *g
	in.key = intruderAPIKey
	Eventually(t, 30*time.Second, "the gateway accepts the intruder's key", func() (bool, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.api+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+intruderAPIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("GET /v1/models: %d", resp.StatusCode)
	})
	return &in
}

// memoryReply is the answer of an echo agent run with --remember.
type memoryReply struct {
	Conversation string   `json:"conversation"`
	Turns        []string `json:"turns"`
	// BodyConversation and BodyUser are the body's conversation_id and user as the pod got them.
	BodyConversation string `json:"bodyConversation"`
	BodyUser         string `json:"bodyUser"`
}

func decodeMemory(t *testing.T, who string, r gwReply) memoryReply {
	t.Helper()
	var m memoryReply
	if r.status != http.StatusOK || json.Unmarshal([]byte(r.content), &m) != nil {
		t.Fatalf("%s: %d %s", who, r.status, r.body)
	}
	return m
}

// TestAttackForeignConversationID: a second Tenant of the namespace sends the first tenant's
// conversation id. It must not be pinned to the victim's session nor reach the victim's session
// memory (the agent keys memory by the X-Conversation-Id the gateway sends), and the victim's
// memory must not change.
func TestAttackForeignConversationID(t *testing.T) {
	e, ns, victim := guardEnv(t, "atk-conv")
	echo := e.Image(t, "echo-agent", "./e2e/cmd/echo-agent")
	e.Apply(t, ns, poolManifest("memory", "memory-model", echo, 1, "--remember"))
	intruder := addIntruder(t, e, ns, victim)
	guardPoolReady(t, e, ns, "memory", 1)
	conv := fmt.Sprintf("conv-%d", time.Now().UnixNano())
	turns := []string{"my vault code is 4321", "and my PIN is 9876"}
	var first gwReply
	Eventually(t, 30*time.Second, "the gateway routes memory-model", func() (bool, error) {
		first = victim.chat(t, "memory-model", conv, turns[0], false, nil)
		return first.status == http.StatusOK, fmt.Errorf("status %d %s", first.status, first.body)
	})
	second := victim.chat(t, "memory-model", conv, turns[1], false, nil)
	mem := decodeMemory(t, "victim's turn 2", second)
	if second.header.Get("X-Neuronetes-Pin") != "held" || !slices.Equal(mem.Turns, turns) {
		t.Fatalf("victim's turn 2: pin %q, memory %+v", second.header.Get("X-Neuronetes-Pin"), mem)
	}
	if mem.Conversation == conv || mem.Conversation == "" {
		t.Fatalf("the pod received conversation id %q: the client's raw key, not a scoped one", mem.Conversation)
	}

	attack := intruder.chat(t, "memory-model", conv, "hi", false, nil)
	got := decodeMemory(t, "intruder", attack)
	if pin := attack.header.Get("X-Neuronetes-Pin"); pin == "held" {
		t.Errorf("the intruder's request with the victim's conversation id was pinned to the victim's session (pin %q)", pin)
	}
	if got.Conversation == mem.Conversation || !slices.Equal(got.Turns, []string{"hi"}) {
		t.Errorf("the intruder was served conversation %q with turns %q; the victim's is %q", got.Conversation, got.Turns, mem.Conversation)
	}

	// The same ids in the body, under the intruder's own session header: an agent that reads the
	// body's conversation_id or user instead of the header must not find the victim's ids there.
	ids := map[string]any{"conversation_id": conv, "user": "victim-user@example.com"}
	inBody := decodeMemory(t, "intruder, ids in the body", intruder.chat(t, "memory-model", "intruder-"+conv, "hey", false, ids))
	if inBody.BodyConversation == conv || inBody.BodyConversation == mem.Conversation || inBody.BodyConversation == "" ||
		inBody.BodyUser == "victim-user@example.com" || inBody.BodyUser == "" {
		t.Errorf("the intruder's body ids reached the pod as conversation_id %q, user %q (raw %q; the victim's conversation %q)",
			inBody.BodyConversation, inBody.BodyUser, conv, mem.Conversation)
	}
	own := decodeMemory(t, "victim, ids in the body", victim.chat(t, "memory-model", "", "body turn", false, map[string]any{"conversation_id": conv}))
	if own.BodyConversation != mem.Conversation || own.Conversation != mem.Conversation {
		t.Errorf("the victim's own body conversation_id reached the pod as %q under header %q, want both %q",
			own.BodyConversation, own.Conversation, mem.Conversation)
	}

	third := victim.chat(t, "memory-model", conv, "what is my code?", false, nil)
	after := decodeMemory(t, "victim's turn 3", third)
	if want := append(slices.Clone(turns), "body turn", "what is my code?"); !slices.Equal(after.Turns, want) || after.Conversation != mem.Conversation {
		t.Errorf("the victim's memory after the attack: %+v, want %q under %q", after, want, mem.Conversation)
	}
}

// TestAttackCaseVariantMessagesBypassGuard: the guardrail blocks a card number in messages; a
// body that also sends "Messages" (or "Model") with benign content must be refused with a 400
// naming the field, not checked with one spelling and served with the other.
func TestAttackCaseVariantMessagesBypassGuard(t *testing.T) {
	e, ns, g := guardEnv(t, "atk-case")
	echo := e.Image(t, "echo-agent", "./e2e/cmd/echo-agent")
	e.Apply(t, ns, poolManifest("guarded", "guarded-model", echo, 1)+`---
apiVersion: neuronetes.io/v1alpha1
kind: GuardrailPolicy
metadata: {name: guarded}
spec:
  targetRef: {kind: AgentPool, name: guarded}
  request:
    - {name: cards, type: pii, action: block, pii: {entities: [CREDIT_CARD]}}
`)
	intruder := addIntruder(t, e, ns, g)
	guardPoolReady(t, e, ns, "guarded", 1)
	const card = `[{"role":"user","content":"charge my card 4111 1111 1111 1111"}]`
	const benign = `[{"role":"user","content":"hello"}]`
	post := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+intruder.api+"/v1/chat/completions", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+intruder.key)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("gateway request: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	Eventually(t, 30*time.Second, "the guard blocks the plain card number", func() (bool, error) {
		status, body := post(`{"model":"guarded-model","messages":` + card + `}`)
		return status == http.StatusOK && strings.Contains(body, `"finish_reason":"content_filter"`) && !strings.Contains(body, "4111"), fmt.Errorf("%d %s", status, body)
	})
	for _, tc := range []struct{ name, body, param string }{
		{"card in messages, benign Messages", `{"model":"guarded-model","messages":` + card + `,"Messages":` + benign + `}`, "messages"},
		{"benign Messages first", `{"model":"guarded-model","Messages":` + benign + `,"messages":` + card + `}`, "messages"},
		{"model and Model", `{"model":"guarded-model","Model":"other-model","messages":` + benign + `}`, "model"},
	} {
		status, body := post(tc.body)
		var eb struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &eb)
		if status != http.StatusBadRequest || eb.Error.Param != tc.param {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.name, status, body, tc.param)
		}
	}
	if status, body := post(`{"model":"guarded-model","messages":` + benign + `}`); status != http.StatusOK {
		t.Errorf("an ordinary body: %d %s", status, body)
	}
}
