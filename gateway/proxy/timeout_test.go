package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStreamTimeouts: events keep a stream alive well past both timeouts; a stream that stops
// after its first event ends with ErrIdleTimeout no sooner than Idle after its last event; one
// that sends nothing ends with ErrFirstTokenTimeout.
func TestStreamTimeouts(t *testing.T) {
	const first, idle, gap = 300 * time.Millisecond, 150 * time.Millisecond, 40 * time.Millisecond
	for _, tc := range []struct {
		name    string
		events  int // events sent gap apart before the backend stalls (or ends, with done)
		done    bool
		wantErr error
	}{
		{"steady events past both timeouts", 20, true, nil},
		{"stall after events", 5, false, ErrIdleTimeout},
		{"no event", 0, false, ErrFirstTokenTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				for i := range tc.events {
					fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
					w.(http.Flusher).Flush()
					time.Sleep(gap)
				}
				if tc.done {
					fmt.Fprint(w, "data: [DONE]\n\n")
					return
				}
				<-r.Context().Done()
			}))
			defer srv.Close()
			u := NewUpstream(Timeouts{FirstToken: first, Idle: idle})
			start := time.Now()
			x, err := u.Send(context.Background(), strings.TrimPrefix(srv.URL, "http://"), "/", []byte(`{}`), http.Header{}, true)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			n, lastAt := 0, start
			for {
				data, err := x.Stream.Next()
				if err != nil {
					err = x.Err(err)
					if tc.wantErr == nil || !errors.Is(err, tc.wantErr) {
						t.Fatalf("after %d events: %v, want %v", n, err, tc.wantErr)
					}
					if d := time.Since(lastAt); tc.events > 0 && (d < idle || d > idle+time.Second) {
						t.Fatalf("idle timeout %v after the last event, want about %v", d, idle)
					}
					if d := time.Since(start); tc.events == 0 && (d < first || d > first+time.Second) {
						t.Fatalf("first-token timeout after %v, want about %v", d, first)
					}
					return
				}
				if string(data) == string(Done) {
					break
				}
				n, lastAt = n+1, time.Now()
			}
			if tc.wantErr != nil || n != tc.events {
				t.Fatalf("stream ended cleanly after %d events, want %d and error %v", n, tc.events, tc.wantErr)
			}
		})
	}
}
