// Package serving is the one place NeuroNetes servers get their connection policy: every HTTP
// server is built by Policy.Server (header, body, write and idle timeouts, a header size limit,
// HTTP/2 stream and ping limits), every gRPC server takes GRPCPolicy.ServerOptions (keepalive
// enforcement, idle connection close, a stream limit), and endpoints that must stay private
// check their address with RequireLoopback and their caller with RequireBearer.
//
// Servers built elsewhere (controller-runtime's) take a policy's request bounds through
// Policy.Bound (see the ctrlserving subpackage).
//
// Three HTTP policies exist. Admin (metrics, health, debug and webhook ports) bounds the whole
// exchange: ReadTimeout for the request, WriteTimeout for the response; Local is Admin with long
// keep-alive for the pod's own containers. Stream (API ports whose
// responses are token streams, SSE, WebSockets or long waits) cannot bound the response as a
// whole, so it uses a stall timeout instead: each Write and Flush of the response must finish
// within WriteTimeout (the client stopped reading otherwise), while the time between writes is
// the handler's business. It arms the write deadline with http.ResponseController before each
// write and flush and disarms it after (an armed HTTP/2 deadline resets the stream when it
// expires, even between writes). ReadTimeout bounds the request only: the server stops applying
// it once the body has been read, so a long wait or stream afterwards keeps its context.
// Hijacked connections (WebSockets) leave with no deadline set; their handler owns them.
package serving

import (
	"bufio"
	"net"
	"net/http"
	"time"
)

// Policy is the timeout and size policy of one HTTP server. A zero duration disables that bound.
type Policy struct {
	// ReadHeaderTimeout bounds reading the request line and headers (slowloris clients).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, headers and body.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing the whole response (Admin), or each write and flush of it
	// (Stream).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carries no request for this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the open HTTP/2 streams of one connection.
	MaxConcurrentStreams int
	// PingTimeout: an HTTP/2 connection silent for this long is pinged, and closed when the
	// answer takes as long again.
	PingTimeout time.Duration
	// Stream selects the stall semantics of WriteTimeout (see the package comment).
	Stream bool
}

// Admin is the policy of metrics, health, debug and webhook servers: short requests, short
// responses.
func Admin() Policy {
	return Policy{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10, MaxConcurrentStreams: 100, PingTimeout: 30 * time.Second}
}

// Local is the policy of servers for the pod's own containers (the sidecar's API on loopback):
// Admin's bounds, with keep-alive connections kept 10 minutes between an agent's turns.
func Local() Policy {
	p := Admin()
	p.IdleTimeout = 10 * time.Minute
	return p
}

// Stream is the policy of API servers whose responses stream or wait long: stall is the longest
// one write or flush may block (30 s when zero).
func Stream(stall time.Duration) Policy {
	if stall <= 0 {
		stall = 30 * time.Second
	}
	return Policy{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, WriteTimeout: stall,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10, MaxConcurrentStreams: 100, PingTimeout: 30 * time.Second,
		Stream: true}
}

// Server returns an http.Server for h on addr under the policy. Callers may set Protocols,
// TLSConfig, BaseContext and the like on the result; they must not replace Handler, whose
// wrapper carries the stream semantics.
func (p Policy) Server(addr string, h http.Handler) *http.Server {
	s := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: p.ReadHeaderTimeout, ReadTimeout: p.ReadTimeout,
		WriteTimeout: p.WriteTimeout, IdleTimeout: p.IdleTimeout, MaxHeaderBytes: p.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: p.MaxConcurrentStreams, SendPingTimeout: p.PingTimeout,
			PingTimeout: p.PingTimeout, WriteByteTimeout: p.WriteTimeout}}
	if p.Stream {
		s.Handler = streamHandler{h: h, stall: p.WriteTimeout}
	}
	return s
}

// streamHandler gives each request a stallWriter. The read deadline needs no help: the server
// clears it when the body has been read (HTTP/1.1), or it only closes a finished body (HTTP/2).
type streamHandler struct {
	h     http.Handler
	stall time.Duration
}

func (s streamHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: s.stall}
	// The server armed the write deadline for the whole response; writes re-arm it themselves.
	sw.disarm()
	// The server's own final flush, after the handler, gets one stall period.
	defer sw.arm()
	s.h.ServeHTTP(sw, r)
}

// stallWriter arms the write deadline around each write and flush.
type stallWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	stall    time.Duration
	hijacked bool
}

func (w *stallWriter) arm() {
	if w.stall > 0 && !w.hijacked {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall))
	}
}

func (w *stallWriter) disarm() {
	if !w.hijacked {
		_ = w.rc.SetWriteDeadline(time.Time{})
	}
}

// Write writes b; it fails when the client does not take it within the stall timeout.
func (w *stallWriter) Write(b []byte) (int, error) {
	w.arm()
	defer w.disarm()
	return w.ResponseWriter.Write(b)
}

// WriteFlusher writes and flushes one piece of a response under one arming of the stall
// deadline: the Stream policy's response writers implement it, so a streamed event costs one
// deadline update to arm and one to disarm rather than two of each for Write then Flush.
type WriteFlusher interface {
	// WriteFlush writes b and flushes it; both together must finish within the stall timeout.
	WriteFlush(b []byte) error
}

// WriteFlush writes b and sends it (WriteFlusher).
func (w *stallWriter) WriteFlush(b []byte) error {
	w.arm()
	defer w.disarm()
	if _, err := w.ResponseWriter.Write(b); err != nil {
		return err
	}
	return w.rc.Flush()
}

// Flush sends what is buffered (http.Flusher); see FlushError.
func (w *stallWriter) Flush() { _ = w.FlushError() }

// FlushError sends what is buffered, within the stall timeout (http.ResponseController uses it).
func (w *stallWriter) FlushError() error {
	w.arm()
	defer w.disarm()
	return w.rc.Flush()
}

// Hijack hands the connection over (http.Hijacker); the server clears its deadlines, and the
// writer stops touching them.
func (w *stallWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.rc.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, brw, err
}

// Unwrap returns the server's ResponseWriter (for http.ResponseController).
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Bound applies the policy's ReadTimeout and WriteTimeout to each request of h from inside the
// handler, for servers whose http.Server NeuroNetes does not build (controller-runtime's webhook
// and metrics servers set only header and idle timeouts): the request body must arrive within
// ReadTimeout and the response be written within WriteTimeout of the handler's start.
func (p Policy) Bound(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		now := time.Now()
		if p.ReadTimeout > 0 {
			_ = rc.SetReadDeadline(now.Add(p.ReadTimeout))
		}
		if p.WriteTimeout > 0 {
			_ = rc.SetWriteDeadline(now.Add(p.WriteTimeout))
		}
		h.ServeHTTP(w, r)
	})
}
