package gwclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestBuildChat(t *testing.T) {
	md := map[string]string{"neuronetes_message_id": "m1"}
	for _, tc := range []struct {
		name, payload, want string
		err                 bool
	}{
		{"text", "hello world", `{"messages":[{"role":"user","content":"hello world"}],"metadata":{"neuronetes_message_id":"m1"},"model":"chat","stream":false}`, false},
		{"json without messages is text", `{"q":1}`, `{"messages":[{"role":"user","content":"{\"q\":1}"}],"metadata":{"neuronetes_message_id":"m1"},"model":"chat","stream":false}`, false},
		{"request kept, model and stream forced", `{"model":"x","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[{"role":"user","content":"hi"}],"metadata":{"a":"b"}}`,
			`{"max_tokens":3,"messages":[{"role":"user","content":"hi"}],"metadata":{"a":"b","neuronetes_message_id":"m1"},"model":"chat","stream":false}`, false},
		{"metadata not an object", `{"messages":[],"metadata":[1]}`, "", true},
	} {
		got, err := BuildChat([]byte(tc.payload), "chat", md)
		if (err != nil) != tc.err {
			t.Fatalf("%s: err = %v", tc.name, err)
		}
		if err == nil && string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestField(t *testing.T) {
	p := []byte(`{"user":"u1","metadata":{"conversation_id":"c-7","n":42},"list":[1]}`)
	for _, tc := range []struct{ path, want string }{
		{"user", "u1"}, {"metadata.conversation_id", "c-7"}, {"metadata.n", "42"}, {"metadata.missing", ""},
		{"list.0", ""}, {"", ""}, {"user.x", ""},
	} {
		if got := Field(p, tc.path); got != tc.want {
			t.Errorf("Field(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
	if Field([]byte("not json"), "a") != "" {
		t.Error("Field of text should be empty")
	}
}

func TestChat(t *testing.T) {
	var gotAuth, gotSession string
	var gotBody map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotSession = r.Header.Get("Authorization"), r.Header.Get("X-Session-Id")
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &gotBody)
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("X-Neuronetes-Pod", "pod-a")
		switch gotBody["model"] {
		case "ok":
			_, _ = w.Write([]byte(`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`))
		case "busy":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"error":{"message":"over quota","type":"rate_limit","code":"rate_limited"}}`))
		case "busy-date":
			w.Header().Set("Retry-After", time.Now().Add(10*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":{"message":"overloaded","type":"service_unavailable","code":"overloaded"}}`))
		case "empty":
			_, _ = w.Write([]byte(`{"choices":[]}`))
		default:
			w.WriteHeader(502)
			_, _ = w.Write([]byte("bad gateway"))
		}
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL + "/", APIKey: "k"}
	ctx := context.Background()
	body, _ := BuildChat([]byte("x"), "ok", nil)
	r, err := c.Chat(ctx, "ns/pool", "s1", body)
	if err != nil || r.RequestID != "req-1" || r.Pod != "pod-a" || gotAuth != "Bearer k" || gotSession != "s1" {
		t.Fatalf("ok: %+v %v auth=%q session=%q", r, err, gotAuth, gotSession)
	}
	body, _ = BuildChat([]byte("x"), "busy", nil)
	_, err = c.Chat(ctx, "ns/pool", "", body)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 429 || se.Code != "rate_limited" || se.RetryAfter != 3*time.Second || se.RequestID != "req-1" {
		t.Fatalf("429: %#v", err)
	}
	body, _ = BuildChat([]byte("x"), "busy-date", nil)
	if _, err = c.Chat(ctx, "ns/pool", "", body); !errors.As(err, &se) || se.Status != 503 || se.RetryAfter < 8*time.Second || se.RetryAfter > 10*time.Second {
		t.Fatalf("503 with an HTTP-date Retry-After: %#v", err)
	}
	body, _ = BuildChat([]byte("x"), "other", nil)
	if _, err = c.Chat(ctx, "ns/pool", "", body); !errors.As(err, &se) || se.Status != 502 || se.Message != "bad gateway" {
		t.Fatalf("502: %v", err)
	}
	body, _ = BuildChat([]byte("x"), "empty", nil)
	if _, err = c.Chat(ctx, "ns/pool", "", body); err == nil {
		t.Fatal("a completion without choices was accepted")
	}
	if gotSession != "" {
		t.Fatalf("an empty session key was sent as %q", gotSession)
	}
}
