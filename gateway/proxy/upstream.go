// Package proxy sends a request to a model server and reads its answer: the connection with its
// timeouts (connect, first token, idle between tokens, whole non-streamed response), the
// classification of failures that may be retried on another pod (before anything reached the
// client), and a bounded server-sent-events reader.
package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/neuronetes/neuronetes/internal/retryafter"
)

// Timeouts of the backend request.
type Timeouts struct {
	// Connect bounds the TCP connection (default 2 s).
	Connect time.Duration
	// FirstToken bounds the wait from sending to the first streamed event (default 60 s).
	FirstToken time.Duration
	// Idle bounds the wait between two streamed events (default 30 s).
	Idle time.Duration
	// Response bounds a whole non-streamed response (default 10 min).
	Response time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	if t.Connect <= 0 {
		t.Connect = 2 * time.Second
	}
	if t.FirstToken <= 0 {
		t.FirstToken = 60 * time.Second
	}
	if t.Idle <= 0 {
		t.Idle = 30 * time.Second
	}
	if t.Response <= 0 {
		t.Response = 10 * time.Minute
	}
	return t
}

// Errors that end a backend exchange.
var (
	// ErrFirstTokenTimeout: no event within Timeouts.FirstToken.
	ErrFirstTokenTimeout = errors.New("backend sent no token within the first-token timeout")
	// ErrIdleTimeout: no event within Timeouts.Idle of the previous one.
	ErrIdleTimeout = errors.New("backend stream idle beyond the idle timeout")
	// ErrResponseTimeout: a non-streamed response took longer than Timeouts.Response.
	ErrResponseTimeout = errors.New("backend response exceeded the response timeout")
)

// Upstream sends requests to model servers.
type Upstream struct {
	client   *http.Client
	timeouts Timeouts
}

// NewUpstream returns an Upstream with its own connection pool.
func NewUpstream(t Timeouts) *Upstream {
	t = t.withDefaults()
	d := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		// The gateway reads what it forwards; compression would cost CPU on both ends for
		// small token chunks.
		DisableCompression: true,
		WriteBufferSize:    32 << 10,
		ReadBufferSize:     32 << 10,
	}
	return &Upstream{client: &http.Client{Transport: tr}, timeouts: t}
}

// Timeouts returns the configured timeouts.
func (u *Upstream) Timeouts() Timeouts { return u.timeouts }

// Exchange is one backend request in progress. Close must be called.
type Exchange struct {
	// Resp is the backend's response (status 2xx; others are returned as *StatusError).
	Resp *http.Response
	// Stream reads events of a streamed response.
	Stream *EventReader

	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	cause  atomic.Pointer[error]
	idle   time.Duration
	// origin and clock time the events for the idle timeout: clock, a stream's reader, holds the
	// monotonic time since origin of the latest event (0 before the first). An event stores it;
	// the timer, when it fires, re-arms itself for what is left of the idle timeout (one clock
	// read per event instead of a timer update). Nil for a whole response.
	origin time.Time
	clock  *EventReader
}

// StatusError is a non-2xx backend answer. Body holds up to 64 KiB of it.
type StatusError struct {
	Status     int
	Body       []byte
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("backend answered %d: %s", e.Status, bytes.TrimSpace(e.Body))
}

// Retryable reports whether err, met before anything was sent to the client, may be retried on
// another pod without running the request twice: a 429 or 503 answer (the backend refused it),
// or a connection failure before the whole request was written. With idempotent (the client
// sent an idempotency key) any connection failure is retryable: the client accepts a second run.
func Retryable(err error, idempotent bool) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status == http.StatusTooManyRequests || se.Status == http.StatusServiceUnavailable
	}
	var ce *ConnError
	return errors.As(err, &ce) && (idempotent || !ce.Sent)
}

// ConnError is a failure to connect or to get a response at all. Sent reports whether the whole
// request had been written when it failed: then the backend may have started it.
type ConnError struct {
	Err  error
	Sent bool
}

func (e *ConnError) Error() string { return "backend connection: " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// Send posts body to http://addr+path. For streams the first-token timer runs until the first
// event; for other responses the response timer runs until Close.
func (u *Upstream) Send(ctx context.Context, addr, path string, body []byte, h http.Header, stream bool) (*Exchange, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	x := &Exchange{ctx: cctx, cancel: cancel, idle: u.timeouts.Idle, origin: time.Now()}
	first, cause := u.timeouts.FirstToken, ErrFirstTokenTimeout
	if !stream {
		first, cause = u.timeouts.Response, ErrResponseTimeout
	}
	x.cause.Store(&cause)
	if stream {
		x.clock = &EventReader{timed: true, origin: x.origin, onFirst: x.firstEvent}
	}
	x.timer = time.AfterFunc(first, x.expire)
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		x.Close()
		return nil, fmt.Errorf("build backend request: %w", err)
	}
	req.Header = h
	req.ContentLength = int64(len(body))
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.Store(sent.Load() || i.Err == nil) },
	}))
	resp, err := u.client.Do(req)
	if err != nil {
		x.Close()
		if c := context.Cause(cctx); c != nil && !errors.Is(c, context.Canceled) {
			return nil, c
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{Err: err, Sent: sent.Load()}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		x.Close()
		se := &StatusError{Status: resp.StatusCode, Body: b, RetryAfter: retryafter.From(resp.Header, time.Now())}
		return nil, se
	}
	x.Resp = resp
	if stream {
		x.clock.r = bufio.NewReaderSize(resp.Body, eventBufferBytes)
		x.Stream = x.clock
	}
	return x, nil
}

// firstEvent switches the timer from the first-token timeout to the idle timeout (called by
// the stream's reader at its first event, after it stored the event's time).
func (x *Exchange) firstEvent() {
	idle := ErrIdleTimeout
	x.cause.Store(&idle)
	x.timer.Reset(x.idle)
}

// expire runs when the timer fires: after an event within the idle timeout it re-arms the
// timer for the rest of it, else it ends the exchange with the timeout's cause.
func (x *Exchange) expire() {
	if l := x.lastEvent(); l > 0 {
		if rest := time.Duration(l) + x.idle - time.Since(x.origin); rest > 0 {
			x.timer.Reset(rest)
			return
		}
	}
	x.cancel(*x.cause.Load())
}

// lastEvent is the monotonic time since origin of the stream's latest event, 0 before the
// first (and for a whole response).
func (x *Exchange) lastEvent() int64 {
	if x.clock == nil {
		return 0
	}
	return x.clock.last.Load()
}

// Err maps a read error to its cause: a timeout of the gateway's rather than the transport's
// "context canceled".
func (x *Exchange) Err(err error) error {
	if err == nil {
		return nil
	}
	if c := context.Cause(x.ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}

// ReadAll reads a whole non-streamed response (up to limit bytes).
func (x *Exchange) ReadAll(limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(x.Resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read backend response: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("backend response larger than %d bytes", limit)
	}
	return b, nil
}

// Close ends the exchange: the backend connection is closed if the body was not read to its end
// (so a cancelled client cancels the backend at once). A stream read to its [DONE] event is
// drained first, in the background (at most drainBytes within drainTimeout): a model server
// ends the chunked body just after [DONE], and a body read to its end keeps the connection in
// the pool for the next request instead of a new connection per stream.
func (x *Exchange) Close() {
	if x.Stream != nil && x.Stream.done && x.Resp != nil {
		x.timer.Stop()
		go x.drain()
		return
	}
	x.close()
}

// Bounds of draining a finished stream's body.
const (
	drainBytes   = 4 << 10
	drainTimeout = time.Second
)

func (x *Exchange) drain() {
	t := time.AfterFunc(drainTimeout, func() { x.cancel(context.Canceled) })
	_, _ = io.Copy(io.Discard, io.LimitReader(x.Resp.Body, drainBytes))
	t.Stop()
	x.close()
}

func (x *Exchange) close() {
	x.timer.Stop()
	x.cancel(context.Canceled)
	if x.Resp != nil {
		x.Resp.Body.Close()
	}
}

// HeaderTTFT is the response header in which a model server of a non-streamed request reports
// its own time to first token, in seconds (the demo agent sets it; vLLM reports the same
// quantity in its per-request metrics). Without it a whole response has no TTFT: its latency is
// the whole generation, not the first token.
const HeaderTTFT = "X-Neuronetes-Ttft-Seconds"

// BackendTTFT reads HeaderTTFT: ok only for a finite value in (0, elapsed], the exchange's
// own duration bounding what the backend may claim.
func BackendTTFT(h http.Header, elapsed time.Duration) (time.Duration, bool) {
	v := h.Get(HeaderTTFT)
	if v == "" {
		return 0, false
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(s) || s <= 0 || s > elapsed.Seconds() {
		return 0, false
	}
	return max(time.Duration(s*float64(time.Second)), 1), true
}
