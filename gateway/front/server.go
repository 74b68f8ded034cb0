// Package front is the gateway's API port: one listener that detects the protocol of each
// connection and request (HTTP/2 with content-type application/grpc goes to the gRPC service,
// an Upgrade: websocket request to the WebSocket handler, everything else to the OpenAI HTTP
// API with SSE streaming), over cleartext (HTTP/1.1 and h2c) or TLS (HTTP/1.1 and h2 by ALPN).
package front

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/neuronetes/neuronetes/gateway/access"
	gatewayv1 "github.com/neuronetes/neuronetes/gateway/api/v1"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/internal/serving"
)

// Server serves the API.
type Server struct {
	// Engine runs requests (required).
	Engine *engine.Engine
	// MaxBodyBytes bounds a request body (default 8 MiB); larger ones get 413.
	MaxBodyBytes int64
	// WriteTimeout bounds each write and flush to a client (default 30 s): the stall timeout of
	// the server's serving.Stream policy and of each WebSocket message.
	WriteTimeout time.Duration
	// WebSocketOrigins are the Origin host patterns accepted on WebSocket upgrades besides the
	// request's own host (path.Match syntax); clients that send no Origin are always accepted.
	WebSocketOrigins []string
	// WebSocketIdleTimeout closes a WebSocket with no request in flight that receives no message
	// for this long (default 5 minutes).
	WebSocketIdleTimeout time.Duration
	// WebSocketRecheck is how often a WebSocket's credential is authenticated again (default
	// 1 minute); it is also checked before each request message and at a JWT's expiry.
	WebSocketRecheck time.Duration
	// Handlers are extra authenticated handlers (stage.Extensions.Handlers).
	Handlers map[string]http.Handler

	grpc     *grpc.Server
	handler  http.Handler
	draining atomic.Bool
	// ws tracks WebSocket connections, which http.Server.Shutdown does not (they are hijacked).
	ws       sync.WaitGroup
	wsCtx    context.Context
	wsCancel context.CancelFunc
}

// Init builds the handler; call once.
func (s *Server) Init() {
	if s.MaxBodyBytes <= 0 {
		s.MaxBodyBytes = 8 << 20
	}
	if s.WriteTimeout <= 0 {
		s.WriteTimeout = 30 * time.Second
	}
	if s.WebSocketIdleTimeout <= 0 {
		s.WebSocketIdleTimeout = 5 * time.Minute
	}
	if s.WebSocketRecheck <= 0 {
		s.WebSocketRecheck = time.Minute
	}
	s.wsCtx, s.wsCancel = context.WithCancel(context.Background())
	// Served through ServeHTTP on the API port's HTTP/2 server: its connection policy (stream
	// limit, pings, idle close) is HTTPServer's serving.Stream, not gRPC's keepalive options,
	// which only gRPC's own transport applies.
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(int(s.MaxBodyBytes)))
	gatewayv1.RegisterInferenceServer(s.grpc, &grpcService{s: s})

	mux := http.NewServeMux()
	chat, compl := s.completions(openai.RouteChat), s.completions(openai.RouteCompletions)
	mux.HandleFunc("POST /v1/chat/completions", chat)
	mux.HandleFunc("POST /v1/completions", compl)
	mux.HandleFunc("POST /v1/embeddings", s.completions(openai.RouteEmbeddings))
	mux.HandleFunc("GET /v1/chat/completions", s.upgradeOnly(openai.RouteChat))
	mux.HandleFunc("GET /v1/completions", s.upgradeOnly(openai.RouteCompletions))
	mux.HandleFunc("GET /v1/models", s.models)
	// A request naming an AgentSession of the caller's namespace (engine.Inbound.Session).
	mux.HandleFunc("POST /v1/sessions/{session}/chat/completions", s.completions(openai.RouteChat))
	mux.HandleFunc("POST /v1/sessions/{session}/completions", s.completions(openai.RouteCompletions))
	for pattern, h := range s.Handlers {
		mux.Handle(pattern, s.authenticated(h))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.NewError(http.StatusNotFound, "invalid_request_error", "unknown_url", "",
			"unknown endpoint %s %s", r.Method, r.URL.Path).Write(w)
	})
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			if s.draining.Load() {
				refuseGRPC(w)
				return
			}
			s.grpc.ServeHTTP(w, r)
			return
		}
		if s.draining.Load() {
			// Tell HTTP/1.1 clients to reconnect elsewhere for their next request.
			w.Header().Set("Connection", "close")
		}
		mux.ServeHTTP(w, r)
	})
}

// refuseGRPC answers a gRPC call with a trailers-only UNAVAILABLE; "Connection: close" makes the
// HTTP/2 server send GOAWAY after it.
func refuseGRPC(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Connection", "close")
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(codes.Unavailable)))
	h.Set("Grpc-Message", "gateway replica is draining; retry")
	w.WriteHeader(http.StatusOK)
}

// Handler returns the API handler (after Init).
func (s *Server) Handler() http.Handler { return s.handler }

// upgradeOnly answers GET on a completions path: a WebSocket upgrade, else 405.
func (s *Server) upgradeOnly(route openai.Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			s.websocketHandler(route, w, r)
			return
		}
		w.Header().Set("Allow", "POST")
		openai.NewError(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "",
			"use POST, or GET with Upgrade: websocket").Write(w)
	}
}

// authenticated wraps an extension handler with the gateway's authentication; the handler
// finds the caller with access.FromContext.
func (s *Server) authenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, aerr := s.Engine.Authenticate(r.Context(), r.Header)
		if aerr != nil {
			aerr.Write(w)
			return
		}
		h.ServeHTTP(w, r.WithContext(access.NewContext(r.Context(), t)))
	})
}

// HTTPServer returns an http.Server for the handler: HTTP/1.1 and cleartext HTTP/2 (prior
// knowledge, as gRPC clients use) without TLS; HTTP/1.1 and HTTP/2 by ALPN with tlsConfig. Its
// timeouts are serving.Stream's with WriteTimeout as the stall timeout: token streams run as long
// as the client keeps reading them.
func (s *Server) HTTPServer(addr string, tlsConfig *tls.Config) *http.Server {
	return s.httpServer(addr, tlsConfig, s.handler)
}

// httpServer is HTTPServer for any handler h.
func (s *Server) httpServer(addr string, tlsConfig *tls.Config, h http.Handler) *http.Server {
	p := &http.Protocols{}
	p.SetHTTP1(true)
	if tlsConfig != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	srv := serving.Stream(s.WriteTimeout).Server(addr, h)
	srv.Protocols, srv.TLSConfig = p, tlsConfig
	return srv
}

// Drain marks the server as draining: HTTP/1.1 responses ask clients to close, HTTP/2 responses
// send GOAWAY, and new gRPC streams are refused with UNAVAILABLE, so gRPC clients, whose
// connections outlive the Service dropping this replica, reconnect and retry elsewhere; open
// streams continue.
func (s *Server) Drain() {
	s.draining.Store(true)
}

// Shutdown stops srv gracefully within ctx: new connections are refused, open requests and
// streams run to their end or until ctx ends, then the rest are closed.
func (s *Server) Shutdown(ctx context.Context, srv *http.Server) error {
	s.Drain()
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	done := make(chan struct{})
	go func() { s.ws.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.wsCancel()
		<-done
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// Listen opens addr.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l, nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }
