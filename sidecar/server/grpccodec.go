package server

import (
	"bytes"
	"encoding/json"

	"github.com/neuronetes/neuronetes/sidecar/store"
)

// The Sessions messages carry one large JSON object (a session or a turn).
// encoding/json scans such a json.RawMessage twice on each end (validate and
// compact on Marshal, validate and decode on Unmarshal), which dominated a
// gRPC call (~0.5 ms for 16 KiB on a loaded 2-core machine). The codec
// instead writes the small fields with encoding/json and appends the object
// last, checked once by the store's validator (which agrees with json.Valid,
// fuzzed); it reads messages of that shape the same way. Anything else goes
// through encoding/json unchanged, so every client's JSON keeps working.

type sessionHead struct {
	ConversationID string `json:"conversation_id"`
	Version        int64  `json:"version"`
}

type putHead struct {
	ConversationID string `json:"conversation_id"`
	IfVersion      *int64 `json:"if_version,omitempty"`
	TTLSeconds     int64  `json:"ttl_seconds,omitempty"`
}

type appendHead struct {
	ConversationID string `json:"conversation_id"`
	TTLSeconds     int64  `json:"ttl_seconds,omitempty"`
}

func marshalMessage(v any) ([]byte, error) {
	switch m := v.(type) {
	case *SessionReply:
		return marshalWithObject(sessionHead{m.ConversationID, m.Version}, "data", m.Data, m)
	case *PutRequest:
		return marshalWithObject(putHead{m.ConversationID, m.IfVersion, m.TTLSeconds}, "data", m.Data, m)
	case *AppendRequest:
		return marshalWithObject(appendHead{m.ConversationID, m.TTLSeconds}, "turn", m.Turn, m)
	}
	return json.Marshal(v)
}

// marshalWithObject encodes head with obj appended as field name. When obj
// is not one valid JSON object, it encodes whole with encoding/json instead
// (which reports invalid JSON as before).
func marshalWithObject(head any, name string, obj json.RawMessage, whole any) ([]byte, error) {
	if !store.IsObject(obj) {
		return json.Marshal(whole)
	}
	h, err := json.Marshal(head)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(h)+len(name)+len(obj)+5)
	out = append(out, h[:len(h)-1]...) // h is an object: drop its '}'
	if len(h) > 2 {
		out = append(out, ',')
	}
	out = append(out, '"')
	out = append(out, name...)
	out = append(out, '"', ':')
	out = append(out, obj...)
	return append(out, '}'), nil
}

func unmarshalMessage(b []byte, v any) error {
	switch m := v.(type) {
	case *SessionReply:
		var h sessionHead
		if obj, ok := splitObject(b, "data", &h); ok {
			*m = SessionReply{ConversationID: h.ConversationID, Version: h.Version, Data: obj}
			return nil
		}
	case *PutRequest:
		var h putHead
		if obj, ok := splitObject(b, "data", &h); ok {
			*m = PutRequest{ConversationID: h.ConversationID, IfVersion: h.IfVersion, TTLSeconds: h.TTLSeconds, Data: obj}
			return nil
		}
	case *AppendRequest:
		var h appendHead
		if obj, ok := splitObject(b, "turn", &h); ok {
			*m = AppendRequest{ConversationID: h.ConversationID, TTLSeconds: h.TTLSeconds, Turn: obj}
			return nil
		}
	}
	return json.Unmarshal(b, v)
}

// splitObject reads b of the shape `{<fields>,"<name>":<object>}`: fields
// are decoded into head by encoding/json, the object is validated and
// returned (copied). ok is false for any other shape, and the caller then
// decodes b with encoding/json, so the result never differs from it:
//   - `,"<name>":` cannot occur inside a JSON string (its quotes would end
//     the string), so its first occurrence is a key at the top level or
//     inside an earlier value, and then the fields before it do not form a
//     valid object and ok is false;
//   - the object runs to the final '}', so it is the last member, and a
//     duplicate key before it loses to it, as in encoding/json.
func splitObject(b []byte, name string, head any) (json.RawMessage, bool) {
	sep := []byte(`,"` + name + `":`)
	i := bytes.Index(b, sep)
	if i < 0 || len(b) < 2 || b[len(b)-1] != '}' {
		return nil, false
	}
	obj := bytes.TrimSpace(b[i+len(sep) : len(b)-1])
	fields := bytes.TrimSpace(b[:i])
	if len(fields) < 2 || fields[0] != '{' || !store.IsObject(obj) {
		return nil, false
	}
	if json.Unmarshal(append(fields[:len(fields):len(fields)], '}'), head) != nil {
		return nil, false
	}
	return bytes.Clone(obj), true
}
