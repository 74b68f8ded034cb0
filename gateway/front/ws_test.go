package front

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/internal/serving"
)

// keyTable authenticates bearer credentials by a mutable table: removing a key revokes it.
type keyTable struct {
	mu   sync.Mutex
	keys map[string]*access.Tenant
}

func (k *keyTable) Authenticate(_ context.Context, h http.Header) (*access.Tenant, *openai.Error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.keys[strings.TrimPrefix(h.Get("Authorization"), "Bearer ")]; ok {
		return t, nil
	}
	return nil, openai.NewError(401, "invalid_request_error", "invalid_api_key", "", "invalid API key")
}

func (k *keyTable) set(key string, t *access.Tenant) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t == nil {
		delete(k.keys, key)
	} else {
		k.keys[key] = t
	}
}

// unsignedJWT is a token with the given expiry; keyTable accepts it like any key, so only the
// gateway's own expiry check can close the socket.
func unsignedJWT(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc(fmt.Appendf(nil, `{"exp":%d}`, exp.Unix())) + ".x"
}

// wsAnswer sends one request on c and reads its answer up to [DONE].
func wsAnswer(ctx context.Context, c *websocket.Conn) error {
	if err := c.Write(ctx, websocket.MessageText, []byte(body)); err != nil {
		return err
	}
	for {
		_, m, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if string(m) == "[DONE]" {
			return nil
		}
	}
}

func TestWebSocketCredentialAndIdle(t *testing.T) {
	tenantA := &access.Tenant{Name: "a", Namespace: "ns", AllModels: true}
	tenantB := &access.Tenant{Name: "b", Namespace: "ns", AllModels: true}
	cases := []struct {
		name             string
		cred             func() string
		recheck, idle    time.Duration
		after            func(k *keyTable, cred string) // after the first answer
		sendAgain        bool                           // send a second request instead of waiting
		keepBusy         time.Duration                  // send requests this long before waiting
		wantStatus       websocket.StatusCode
		wantReason       string
		notBefore, limit time.Duration // the close comes in [notBefore, limit] after the first answer
	}{
		{name: "revoked key, periodic recheck", cred: func() string { return "key-1" }, recheck: 100 * time.Millisecond, idle: time.Hour,
			after: func(k *keyTable, cred string) { k.set(cred, nil) }, wantStatus: websocket.StatusPolicyViolation,
			wantReason: "invalid_api_key", limit: 2 * time.Second},
		{name: "revoked key, next message", cred: func() string { return "key-2" }, recheck: time.Hour, idle: time.Hour,
			after: func(k *keyTable, cred string) { k.set(cred, nil) }, sendAgain: true, wantStatus: websocket.StatusPolicyViolation,
			wantReason: "invalid_api_key", limit: 2 * time.Second},
		{name: "key moved to another tenant", cred: func() string { return "key-3" }, recheck: 100 * time.Millisecond, idle: time.Hour,
			after: func(k *keyTable, cred string) { k.set(cred, tenantB) }, wantStatus: websocket.StatusPolicyViolation,
			wantReason: "another tenant", limit: 2 * time.Second},
		{name: "token expires", cred: func() string { return unsignedJWT(time.Now().Add(2 * time.Second)) }, recheck: time.Hour, idle: time.Hour,
			wantStatus: websocket.StatusPolicyViolation, wantReason: "token_expired", limit: 4 * time.Second},
		{name: "idle socket", cred: func() string { return "key-4" }, recheck: time.Hour, idle: 300 * time.Millisecond,
			wantStatus: websocket.StatusGoingAway, wantReason: "idle", limit: 2 * time.Second},
		{name: "active socket outlives the idle timeout", cred: func() string { return "key-5" }, recheck: time.Hour, idle: 500 * time.Millisecond,
			keepBusy: 1500 * time.Millisecond, wantStatus: websocket.StatusGoingAway, wantReason: "idle", notBefore: 1500 * time.Millisecond, limit: 4 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := &keyTable{keys: map[string]*access.Tenant{}}
			cred := tc.cred()
			k.set(cred, tenantA)
			base := gatewayWith(t, k, func(s *Server) { s.WebSocketRecheck, s.WebSocketIdleTimeout = tc.recheck, tc.idle })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/v1/chat/completions",
				&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			if err := wsAnswer(ctx, c); err != nil {
				t.Fatalf("first request: %v", err)
			}
			t0 := time.Now()
			if tc.after != nil {
				tc.after(k, cred)
			}
			for time.Since(t0) < tc.keepBusy {
				if err := wsAnswer(ctx, c); err != nil {
					t.Fatalf("request on an active socket: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if tc.sendAgain {
				_ = c.Write(ctx, websocket.MessageText, []byte(body))
			}
			var err2 error
			for err2 == nil {
				_, _, err2 = c.Read(ctx)
			}
			d := time.Since(t0)
			var ce websocket.CloseError
			if st := websocket.CloseStatus(err2); st != tc.wantStatus {
				t.Fatalf("socket ended with %v (status %v), want status %v", err2, st, tc.wantStatus)
			}
			if !asClose(err2, &ce) || !strings.Contains(ce.Reason, tc.wantReason) {
				t.Errorf("close reason %q, want it to mention %q", ce.Reason, tc.wantReason)
			}
			if d < tc.notBefore || d > tc.limit {
				t.Errorf("closed %v after the first answer, want within [%v, %v]", d, tc.notBefore, tc.limit)
			}
		})
	}
}

func asClose(err error, ce *websocket.CloseError) bool {
	return errors.As(err, ce)
}

// TestAPIServerPolicy checks that the API port takes serving.Stream with WriteTimeout as its
// stall timeout: a stream that outlasts WriteTimeout while the client reads is not cut.
func TestAPIServerPolicy(t *testing.T) {
	s := &Server{WriteTimeout: 100 * time.Millisecond}
	s.Init()
	// A token stream of 600 ms with 30 ms between events, six times WriteTimeout.
	hs := s.httpServer("", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(serving.WriteFlusher); !ok {
			t.Error("the API server's response writer is no serving.WriteFlusher")
		}
		sink := newHTTPSink(w)
		for i := range 20 {
			if err := sink.Event(fmt.Appendf(nil, `{"i":%d}`, i)); err != nil {
				t.Errorf("event %d: %v", i, err)
				return
			}
			time.Sleep(30 * time.Millisecond)
		}
		_ = sink.Finish()
	}))
	if hs.ReadHeaderTimeout != 10*time.Second || hs.ReadTimeout <= 0 || hs.IdleTimeout <= 0 || hs.MaxHeaderBytes != 64<<10 ||
		hs.HTTP2 == nil || hs.HTTP2.MaxConcurrentStreams != 100 {
		t.Fatalf("API server limits: header %v read %v idle %v max header %d http2 %+v", hs.ReadHeaderTimeout, hs.ReadTimeout,
			hs.IdleTimeout, hs.MaxHeaderBytes, hs.HTTP2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(l)
	defer hs.Close()
	resp, err := http.Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.HasSuffix(string(b), "data: [DONE]\n\n") || strings.Count(string(b), "data: ") != 21 {
		t.Fatalf("stream cut: %q", b)
	}
}
