package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkParse decodes a 40-turn chat body of about 100 KiB (checkKeys included).
func BenchmarkParse(b *testing.B) {
	msgs := make([]Message, 40)
	for i := range msgs {
		c, _ := json.Marshal(strings.Repeat("some words of a long conversation ", 75))
		msgs[i] = Message{Role: "user", Content: c}
	}
	m, _ := json.Marshal(msgs)
	body := []byte(`{"model":"m","stream":true,"messages":` + string(m) + `,"metadata":{"conversation_id":"c"}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(RouteChat, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckKeys(b *testing.B) {
	msgs := make([]Message, 40)
	for i := range msgs {
		c, _ := json.Marshal(strings.Repeat("some words of a long conversation ", 75))
		msgs[i] = Message{Role: "user", Content: c}
	}
	m, _ := json.Marshal(msgs)
	body := []byte(`{"model":"m","stream":true,"messages":` + string(m) + `,"metadata":{"conversation_id":"c"}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := checkKeys(body); err != nil {
			b.Fatal(err)
		}
	}
}
