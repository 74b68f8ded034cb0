package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/internal/serving"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

// sessionsPrefix is the path prefix of the session routes.
const sessionsPrefix = "/v1/sessions/"

// FastServer returns a fasthttp server for the same HTTP API as Handler.
// The session routes (GET/PUT/DELETE /v1/sessions/{id}, POST
// /v1/sessions/{id}/turns) are served natively; every other request (vectors,
// embeddings, /healthz, /metrics, unknown paths) goes through Handler's mux
// unchanged. fasthttp reads a request in the connection's goroutine, with no
// per-request background reader and pooled request state, which takes tens
// of µs off the loopback hop compared with net/http (see docs/sidecar.md).
//
// Store calls run under base (which carries the logger). Bodies over
// maxBody (at least the session limit and the vector API's) are refused by
// fasthttp itself with a plain 413 and the connection closed.
func (s *Server) FastServer(base context.Context, maxBody int) *fasthttp.Server {
	fallback := fasthttpadaptor.NewFastHTTPHandler(s.Handler())
	local := serving.Local()
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if !s.serveFastSession(base, ctx) {
				fallback(ctx)
			}
		},
		Logger:                fastLogger{klog.FromContext(base)},
		ErrorHandler:          fastRequestError,
		MaxRequestBodySize:    max(maxBody, s.store.MaxSize(), maxVectorBody) + 64<<10,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		// serving.Local, as for the net/http engine: agents keep connections
		// open between turns. fasthttp's ReadTimeout runs from a request's
		// first byte, so it bounds slow headers too.
		ReadTimeout:  local.ReadTimeout,
		WriteTimeout: local.WriteTimeout,
		IdleTimeout:  local.IdleTimeout,
		// A 16 KiB session and its headers go out in one write, and come
		// in with few reads (the defaults are 4 KiB).
		ReadBufferSize:  32 << 10,
		WriteBufferSize: 32 << 10,
	}
}

// fastRequestError answers a request fasthttp could not read, in the API's
// JSON error format: 413 for a body over the server's limit (fasthttp's
// default says 400), 431 for oversized headers, 408 for a read timeout, else
// 400. fasthttp closes the connection afterwards.
func fastRequestError(ctx *fasthttp.RequestCtx, err error) {
	code := http.StatusBadRequest
	var small *fasthttp.ErrSmallBuffer
	var nerr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.As(err, &small):
		code = http.StatusRequestHeaderFieldsTooLarge
	case errors.As(err, &nerr) && nerr.Timeout():
		code = http.StatusRequestTimeout
	}
	b, _ := json.Marshal(errorBody{Error: "request: " + err.Error()})
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// fastLogger sends fasthttp's own messages (connection-level errors such as
// an oversize body or a malformed request) to klog at V(2).
type fastLogger struct{ log klog.Logger }

// Printf implements fasthttp.Logger.
func (l fastLogger) Printf(format string, args ...any) {
	l.log.V(2).Info("http connection", "msg", fmt.Sprintf(format, args...))
}

// fastRoute maps a request onto a session operation; ok is false for
// anything that is not exactly one of the four session routes.
func fastRoute(method, path string) (op, id string, ok bool) {
	rest, found := strings.CutPrefix(path, sessionsPrefix)
	if !found || rest == "" {
		return "", "", false
	}
	if id, found = strings.CutSuffix(rest, "/turns"); found {
		if method != http.MethodPost || strings.Contains(id, "/") || id == "" {
			return "", "", false
		}
		return "session_append", id, true
	}
	if strings.Contains(rest, "/") {
		return "", "", false
	}
	switch method {
	case http.MethodGet:
		return "session_get", rest, true
	case http.MethodPut:
		return "session_put", rest, true
	case http.MethodDelete:
		return "session_delete", rest, true
	}
	return "", "", false
}

// serveFastSession serves ctx if it is a session route and reports whether
// it did. Status codes, headers and bodies match the net/http handlers.
func (s *Server) serveFastSession(base context.Context, ctx *fasthttp.RequestCtx) bool {
	method := string(ctx.Method())
	op, id, ok := fastRoute(method, string(ctx.Path()))
	if !ok {
		return false
	}
	start := time.Now()
	req, err := decodeSessionHead(id, string(ctx.Request.Header.Peek("If-Match")),
		string(ctx.QueryArgs().Peek("ttl")), string(ctx.Request.Header.Peek(TTLHeader)))
	if err == nil && (method == http.MethodPut || method == http.MethodPost) {
		// fasthttp reuses the body buffer after the handler returns; the
		// store only reads it during the call (it copies what it keeps).
		req.body = ctx.PostBody()
		err = checkBodySize(req.body, s.store.MaxSize())
	}
	var ver int64
	if err == nil {
		switch op {
		case "session_get":
			var sess *store.Session
			if sess, err = s.store.Get(base, req.id); err == nil {
				ctx.Response.Header.Set("ETag", strconv.FormatInt(sess.Version, 10))
				ctx.SetContentType("application/json")
				// Session data is never modified once returned (near-cache
				// entries included), so it is sent without a copy.
				ctx.Response.SetBodyRaw(sess.Data)
			}
		case "session_put":
			ver, err = s.store.Put(base, req.id, req.body, req.ifVersion, req.ttl)
		case "session_append":
			ver, err = s.store.Append(base, req.id, req.body, req.ttl)
		case "session_delete":
			if err = s.store.Delete(base, req.id, req.ifVersion); err == nil {
				ctx.SetStatusCode(http.StatusNoContent)
			}
		}
	}
	switch {
	case err != nil:
		s.failFast(base, ctx, method, err, ver)
	case op == "session_put" || op == "session_append":
		v := strconv.FormatInt(ver, 10)
		ctx.Response.Header.Set("ETag", v)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"version":` + v + "}\n")
	}
	if s.metrics != nil {
		s.metrics.RequestLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
		s.metrics.Requests.WithLabelValues("http", op, strconv.Itoa(ctx.Response.StatusCode())).Inc()
	}
	return true
}

// failFast is fail for fasthttp: same status, Retry-After and JSON body.
func (s *Server) failFast(base context.Context, ctx *fasthttp.RequestCtx, method string, err error, version int64) {
	code := httpStatus(err)
	if code == http.StatusServiceUnavailable {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(1, int(s.RetryAfter.Seconds()))))
	}
	logFailure(base, method, string(ctx.Path()), code, err)
	b, _ := json.Marshal(errorBody{Error: err.Error(), Version: version})
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}
