package engine

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestStreamReusesBackendConnection: streamed requests one after another reuse one backend
// connection: the body is drained to its end after [DONE] (in the background), so the
// transport keeps the connection.
func TestStreamReusesBackendConnection(t *testing.T) {
	b := newBackend(t)
	var mu sync.Mutex
	conns := map[string]bool{} // the client addresses of the backend's connections
	// As a paced model server: [DONE] flushed, the end of the chunked body a moment later.
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"a ", "b "} {
			fmt.Fprintf(w, "data: %s\n\n", chunkJSON(tok, ""))
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond)
	})
	h := newHarness(t, b)
	for i := range 5 {
		if s := h.do(context.Background(), anyone, nil, chat(true, "")); s.err != nil {
			t.Fatalf("request %d: %v", i, s.err)
		}
		time.Sleep(100 * time.Millisecond) // the drain, in the background, ends the body

	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(conns); n != 1 {
		t.Fatalf("5 streamed requests opened %d backend connections, want 1", n)
	}
}
