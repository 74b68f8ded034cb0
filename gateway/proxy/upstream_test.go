package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestConnErrorSent: a backend that read the request and then dropped the connection may have
// run it (Sent, not retryable); a refused connection never reached a backend (retryable).
func TestConnErrorSent(t *testing.T) {
	var ran atomic.Int32
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		ran.Add(1)
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	defer hang.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close()

	u := NewUpstream(Timeouts{})
	for _, tc := range []struct {
		name, addr string
		sent       bool
	}{
		{"dropped after the request", hang.Listener.Addr().String(), true},
		{"connection refused", refused, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := u.Send(context.Background(), tc.addr, "/v1/chat/completions", []byte(`{"model":"m"}`), http.Header{}, false)
			var ce *ConnError
			if !errors.As(err, &ce) || ce.Sent != tc.sent {
				t.Fatalf("err %#v, want a ConnError with Sent=%v", err, tc.sent)
			}
			if Retryable(err, false) == tc.sent {
				t.Fatalf("Retryable = %v for Sent=%v", !tc.sent, tc.sent)
			}
		})
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the dropping backend ran %d requests, want 1 (no transport-level replay of a POST)", n)
	}
}
