package sessionkey

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// IdentityFields are the top-level body fields that carry a client's end-user or conversation
// id; ScopeFields replaces each with its scoped form.
var IdentityFields = []string{"user", "conversation_id"}

// ScopeFields replaces, in the body the agent receives, every field that names a client's user
// or conversation with the tenant's scoped form of its value: "user", "conversation_id" and each
// metadata.<key> that sources names. A value that is a session key source becomes exactly the
// scoped key of the X-Conversation-Id header, so an agent that reads the body instead of the
// header finds the same conversation, and tenant B naming tenant A's conversation in the body
// reaches another one. No raw client id reaches the pod. Empty and absent fields are left as
// they are; every other byte of the body is kept.
func (s *Scoper) ScopeFields(t *access.Tenant, req *openai.Request, sources []route.KeySource) error {
	for _, f := range IdentityFields {
		v, ok := stringField(req.Field(f))
		if !ok {
			continue
		}
		scoped := s.Scope(t, v)
		b, _ := json.Marshal(scoped) // a hex string: cannot fail
		req.Set(f, b)
		switch f {
		case "user":
			req.User = scoped
		case "conversation_id":
			req.ConversationID = scoped
		}
	}
	for _, src := range sources {
		key, ok := strings.CutPrefix(src.Body, "metadata.")
		if !ok {
			continue
		}
		v := affinity.Normalize(req.Metadata[key])
		if v == "" {
			continue
		}
		if err := req.SetMetadata(key, s.Scope(t, v)); err != nil {
			return fmt.Errorf("scope %s: %w", src.Body, err)
		}
	}
	return nil
}

// stringField is the normalized value (affinity.Normalize) of a JSON string field that holds
// more than white space.
func stringField(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	v = affinity.Normalize(v)
	return v, v != ""
}
