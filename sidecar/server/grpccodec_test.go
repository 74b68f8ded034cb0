package server

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// FuzzGRPCCodec checks that the codec's Unmarshal gives exactly what
// encoding/json gives (same error or no error, same message) for any
// input, and that what it Marshals decodes with encoding/json to the same
// message.
func FuzzGRPCCodec(f *testing.F) {
	v := int64(3)
	for _, m := range []any{
		&SessionReply{ConversationID: "c1", Version: 7, Data: json.RawMessage(`{"turns":[{"role":"user","content":"hi"}]}`)},
		&PutRequest{ConversationID: "c1", Data: json.RawMessage(`{"a":1}`), IfVersion: &v, TTLSeconds: 60},
		&AppendRequest{ConversationID: "c1", Turn: json.RawMessage(`{"role":"user"}`)},
	} {
		b, err := JSONCodec{}.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{,"data":{}}`, `{"conversation_id":"x","data":{"a":1}} `, `{"conversation_id":"x","data": {"a":1} }`,
		`{"data":{"z":1},"conversation_id":"x","data":{"a":1}}`, `{"extra":{"a":1,"data":{"q":1}}}`,
		`{"conversation_id":"x,\"data\":{}","data":{}}`, `{"conversation_id":"x","version":1e2,"data":{}}`,
		`{"conversation_id":"x","data":null}`, `{"conversation_id":"x","data":[1]}`, `{"Conversation_ID":"x","turn":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, mk := range []func() any{
			func() any { return new(SessionReply) },
			func() any { return new(PutRequest) },
			func() any { return new(AppendRequest) },
		} {
			want, got := mk(), mk()
			werr := json.Unmarshal(b, want)
			gerr := JSONCodec{}.Unmarshal(b, got)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%T: encoding/json error %v, codec error %v", want, werr, gerr)
			}
			if werr != nil {
				continue
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("%T: encoding/json %+v, codec %+v", want, want, got)
			}
			out, err := JSONCodec{}.Marshal(got)
			if err != nil {
				// Only a raw field that is not valid JSON (encoding/json
				// decodes any valid value) cannot be encoded.
				continue
			}
			back := mk()
			if err := json.Unmarshal(out, back); err != nil {
				t.Fatalf("%T: Marshal wrote invalid JSON %q: %v", got, out, err)
			}
			if !reflect.DeepEqual(normalize(back), normalize(got)) {
				t.Fatalf("%T: round trip %+v != %+v", got, back, got)
			}
		}
	})
}

// normalize compacts the raw field (encoding/json compacts on Marshal, and
// writes an absent one as null).
func normalize(m any) any {
	compact := func(r json.RawMessage) string {
		if len(r) == 0 || string(r) == "null" {
			return ""
		}
		var b []byte
		if c, err := json.Marshal(r); err == nil {
			b = c
		}
		return string(b)
	}
	switch m := m.(type) {
	case *SessionReply:
		return [3]any{m.ConversationID, m.Version, compact(m.Data)}
	case *PutRequest:
		v := "absent"
		if m.IfVersion != nil {
			v = fmt.Sprint(*m.IfVersion)
		}
		return [4]any{m.ConversationID, v, m.TTLSeconds, compact(m.Data)}
	case *AppendRequest:
		return [3]any{m.ConversationID, m.TTLSeconds, compact(m.Turn)}
	}
	return m
}
