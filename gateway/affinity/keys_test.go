package affinity

import (
	"net/http"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

func TestExtract(t *testing.T) {
	body := func(s string) *openai.Request {
		r, err := openai.Parse(openai.RouteChat, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	full := `{"model":"m","messages":[{"role":"user","content":"hi"}],"conversation_id":"conv-1","user":"alice","metadata":{"chat":"c-9"}}`
	bare := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name     string
		sources  []route.KeySource
		header   map[string]string
		body     string
		want     string
		wantFrom string
	}{
		{"default: x-session-id first", route.DefaultSessionKeys, map[string]string{"X-Session-Id": "s-1", "X-Conversation-Id": "c-1"}, full, "s-1", "header:x-session-id"},
		{"default: x-conversation-id next", route.DefaultSessionKeys, map[string]string{"X-Conversation-Id": "c-1"}, full, "c-1", "header:x-conversation-id"},
		{"default: body conversation_id", route.DefaultSessionKeys, nil, full, "conv-1", "body:conversation_id"},
		{"default: metadata.conversation_id", route.DefaultSessionKeys, nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"conversation_id":"mc"},"user":"u"}`, "mc", "body:metadata.conversation_id"},
		{"default: user last", route.DefaultSessionKeys, nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"user":"bob"}`, "bob", "body:user"},
		{"default: none", route.DefaultSessionKeys, nil, bare, "", ""},
		{"custom order: user before header", []route.KeySource{{Body: "user"}, {Header: "x-session-id"}}, map[string]string{"X-Session-Id": "s"}, full, "alice", "body:user"},
		{"custom header", []route.KeySource{{Header: "x-tenant-chat"}}, map[string]string{"X-Tenant-Chat": "tc"}, bare, "tc", "header:x-tenant-chat"},
		{"metadata key", []route.KeySource{{Body: "metadata.chat"}}, nil, full, "c-9", "body:metadata.chat"},
		{"blank header skipped", route.DefaultSessionKeys, map[string]string{"X-Session-Id": "   "}, full, "conv-1", "body:conversation_id"},
		{"empty sources", nil, map[string]string{"X-Session-Id": "s"}, full, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, from := Extract(tt.sources, h, body(tt.body))
			if got != tt.want {
				t.Fatalf("key = %q, want %q", got, tt.want)
			}
			if tt.want != "" && from.String() != tt.wantFrom {
				t.Fatalf("from = %s, want %s", from, tt.wantFrom)
			}
		})
	}
	t.Run("long key cut", func(t *testing.T) {
		h := http.Header{}
		h.Set("X-Session-Id", strings.Repeat("k", 5000))
		got, _ := Extract(route.DefaultSessionKeys, h, nil)
		if len(got) != MaxKeyLen {
			t.Fatalf("len = %d, want %d", len(got), MaxKeyLen)
		}
	})
}
