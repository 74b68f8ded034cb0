package engine

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// bufferSink records the order in which a stream's events are held and sent (EventBuffer).
type bufferSink struct {
	discardSink
	mu      sync.Mutex
	ops     []string // "buf:<content>", "ev:<content>", "flush"
	pending []string // held, not yet sent
	sent    []string // in the order the client got them
}

func content(d []byte) string {
	c, err := openai.ParseChunk(d)
	if err != nil || len(c.Choices) == 0 {
		return "?"
	}
	return c.Choices[0].Delta.Content
}

func (s *bufferSink) BufferEvent(d []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, "buf:"+content(d))
	s.pending = append(s.pending, content(d))
	return nil
}

func (s *bufferSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, "flush")
	s.sent, s.pending = append(s.sent, s.pending...), nil
	return nil
}

func (s *bufferSink) Event(d []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, "ev:"+content(d))
	s.sent, s.pending = append(append(s.sent, s.pending...), content(d)), nil
	return nil
}

func (s *bufferSink) Finish() error { return s.Flush() }

// sentNow is what the client has got so far.
func (s *bufferSink) sentNow() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// TestRelayCoalescesBufferedEvents: events that reach the gateway together are held and sent with
// the last of them (one write), in order; when nothing more is at hand (here after a dropped
// usage chunk), what is held is sent before the relay waits for the backend.
func TestRelayCoalescesBufferedEvents(t *testing.T) {
	b := newBackend(t)
	release := make(chan struct{})
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		var burst strings.Builder
		for _, tok := range []string{"a", "b", "c"} { // one write: the gateway reads them together
			fmt.Fprintf(&burst, "data: %s\n\n", chunkJSON(tok, ""))
		}
		// A usage-only chunk the client did not ask for: dropped, so "c", held for it, must be
		// sent before the relay waits.
		burst.WriteString(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}` + "\n\n")
		fmt.Fprint(w, burst.String())
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintf(w, "data: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chunkJSON("d", ""), chunkJSON("e", "stop"))
	})
	h := newHarness(t, b)
	s := &bufferSink{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.e.Handle(context.Background(), Inbound{Route: openai.RouteChat, Header: http.Header{}, Body: []byte(chat(true, "")),
			Protocol: "http", Tenant: tenant("t", access.Quota{})}, s)
	}()
	// While the backend pauses, every event of the burst has reached the client.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Join(s.sentNow(), "") != "abc" {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("during the pause the client has %q (ops %v), want abc", s.sentNow(), s.ops)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	<-done
	if got := strings.Join(s.sentNow(), ""); got != "abcde" {
		t.Fatalf("client got %q, want abcde (ops %v)", got, s.ops)
	}
	held := 0
	for _, op := range s.ops {
		if strings.HasPrefix(op, "buf:") {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("no event held though they arrived together: ops %v", s.ops)
	}
}
