package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// sseSink records what an SSE client would receive: Event and BufferEvent frame the data as
// "data: ...\n\n" themselves.
type sseSink struct {
	discardSink
	out strings.Builder
}

func (s *sseSink) Event(d []byte) error       { s.out.WriteString("data: " + string(d) + "\n\n"); return nil }
func (s *sseSink) BufferEvent(d []byte) error { return s.Event(d) }
func (s *sseSink) Flush() error               { return nil }
func (s *sseSink) Finish() error              { s.out.WriteString("data: [DONE]\n\n"); return nil }

// frameSink is an sseSink that takes framed events too (FrameWriter), counting them.
type frameSink struct {
	sseSink
	frames int
}

func (s *frameSink) EventFrame(f []byte) error       { s.frames++; s.out.Write(f); return nil }
func (s *frameSink) BufferEventFrame(f []byte) error { return s.EventFrame(f) }

// TestRelayFrames checks that a sink given the backend's frames (FrameWriter) receives the same
// bytes as one that frames each event itself, with and without usage, and that frames were used.
func TestRelayFrames(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("data: " + chunkJSON("", "") + "\n\n")
	for i := 0; i < 50; i++ {
		sb.WriteString("data: " + chunkJSON(fmt.Sprintf("tok%d ", i), "") + "\n\n")
	}
	sb.WriteString(": keep-alive\n\ndata:" + chunkJSON("no space ", "") + "\n\ndata: " + chunkJSON("crlf ", "") + "\r\n\r\n")
	sb.WriteString(`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":53,"total_tokens":56}}` + "\n\n")
	sb.WriteString("data: [DONE]\n\n")
	payload := sb.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		half := len(payload) / 2
		_, _ = w.Write([]byte(payload[:half]))
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte(payload[half:]))
	}))
	defer srv.Close()
	h := newHarness(t, &backend{srv: srv, name: strings.TrimPrefix(srv.URL, "http://")})
	for _, extra := range []string{"", `,"stream_options":{"include_usage":true}`} {
		body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]` + extra + `}`)
		in := Inbound{Route: openai.RouteChat, Header: http.Header{}, Body: body, Protocol: "http", Tenant: tenant("t", access.Quota{})}
		plain, framed := &sseSink{}, &frameSink{}
		h.e.Handle(context.Background(), in, plain)
		h.e.Handle(context.Background(), in, framed)
		if plain.out.String() != framed.out.String() {
			t.Errorf("usage %q: framed output differs:\n plain  %q\n framed %q", extra, plain.out.String(), framed.out.String())
		}
		if framed.frames < 40 || !strings.Contains(plain.out.String(), "tok49 ") {
			t.Errorf("usage %q: %d framed events; output %.200q", extra, framed.frames, plain.out.String())
		}
	}
}
