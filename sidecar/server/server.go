// Package server exposes the sidecar's session and vector APIs over HTTP/JSON
// (loopback TCP and a unix socket) and gRPC.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/metrics"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

// Server holds the API's dependencies. Build with New.
type Server struct {
	store   *store.Store
	vectors *Vectors
	metrics *metrics.Metrics
	gather  prometheus.Gatherer
	// RetryAfter is the Retry-After value sent with 503s.
	RetryAfter time.Duration
}

// New returns a server over st; vectors may be nil (vector API disabled).
func New(st *store.Store, vectors *Vectors, m *metrics.Metrics, g prometheus.Gatherer) *Server {
	return &Server{store: st, vectors: vectors, metrics: m, gather: g, RetryAfter: time.Second}
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}", s.instrument("session_get", s.getSession))
	mux.HandleFunc("PUT /v1/sessions/{id}", s.instrument("session_put", s.putSession))
	mux.HandleFunc("DELETE /v1/sessions/{id}", s.instrument("session_delete", s.deleteSession))
	mux.HandleFunc("POST /v1/sessions/{id}/turns", s.instrument("session_append", s.appendTurn))
	if s.vectors != nil {
		s.vectors.routes(mux, s.instrument)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if s.gather != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{}))
	}
	return mux
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(c int) { w.code = c; w.ResponseWriter.WriteHeader(c) }

func (s *Server) instrument(op string, h http.HandlerFunc) http.HandlerFunc {
	if s.metrics == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r)
		s.metrics.RequestLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
		s.metrics.Requests.WithLabelValues("http", op, strconv.Itoa(sw.code)).Inc()
	}
}

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error   string `json:"error"`
	Version int64  `json:"current_version,omitempty"`
}

// httpStatus maps an error to its HTTP status.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, store.ErrBadID), errors.Is(err, store.ErrBadDocument):
		return http.StatusBadRequest
	case errors.Is(err, errTooLarge), errors.Is(err, store.ErrTooLarge), errors.Is(err, frame.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict):
		return http.StatusPreconditionFailed
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, keys.ErrNoKeys):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	// Includes frame.ErrAuth, frame.ErrMalformed and keys.ErrUnknownKey: a
	// stored value we cannot open is a server-side integrity error.
	return http.StatusInternalServerError
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error, version int64) {
	code := httpStatus(err)
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.RetryAfter.Seconds()))))
	}
	logFailure(r.Context(), r.Method, r.URL.Path, code, err)
	writeJSON(w, code, errorBody{Error: err.Error(), Version: version})
}

// logFailure logs server-side failures (5xx); 503s only at V(2).
func logFailure(ctx context.Context, method, path string, code int, err error) {
	if code < 500 {
		return
	}
	lvl := 0
	if code == http.StatusServiceUnavailable {
		lvl = 2
	}
	klog.FromContext(ctx).V(lvl).Info("request failed", "method", method, "path", path, "code", code, "err", err,
		"integrity", errors.Is(err, frame.ErrAuth) || errors.Is(err, keys.ErrUnknownKey))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	req, err := decodeSession(r, s.store.MaxSize())
	if err != nil {
		s.fail(w, r, err, 0)
		return
	}
	sess, err := s.store.Get(r.Context(), req.id)
	if err != nil {
		s.fail(w, r, err, 0)
		return
	}
	h := w.Header()
	h["Etag"] = []string{strconv.FormatInt(sess.Version, 10)}
	h["Content-Type"] = jsonContentType
	// An explicit length lets net/http send the body as is: without it a
	// body over 2 KiB goes out chunked, in more writes.
	h["Content-Length"] = []string{strconv.Itoa(len(sess.Data))}
	_, _ = w.Write(sess.Data)
}

// jsonContentType is shared by every response (net/http only reads it).
var jsonContentType = []string{"application/json"}

// writeVersion answers a write with {"version":N} and the ETag, without a
// JSON encoder.
func writeVersion(w http.ResponseWriter, v int64) {
	h := w.Header()
	ver := strconv.FormatInt(v, 10)
	h["Etag"] = []string{ver}
	h["Content-Type"] = jsonContentType
	_, _ = w.Write([]byte(`{"version":` + ver + "}\n"))
}

func (s *Server) putSession(w http.ResponseWriter, r *http.Request) {
	req, err := decodeSession(r, s.store.MaxSize())
	if err != nil {
		s.fail(w, r, err, 0)
		return
	}
	v, err := s.store.Put(r.Context(), req.id, req.body, req.ifVersion, req.ttl)
	if err != nil {
		s.fail(w, r, err, v)
		return
	}
	writeVersion(w, v)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	req, err := decodeSession(r, s.store.MaxSize())
	if err != nil {
		s.fail(w, r, err, 0)
		return
	}
	if err := s.store.Delete(r.Context(), req.id, req.ifVersion); err != nil {
		s.fail(w, r, err, 0)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) appendTurn(w http.ResponseWriter, r *http.Request) {
	req, err := decodeSession(r, s.store.MaxSize())
	if err != nil {
		s.fail(w, r, err, 0)
		return
	}
	v, err := s.store.Append(r.Context(), req.id, req.body, req.ttl)
	if err != nil {
		s.fail(w, r, err, 0)
		return
	}
	writeVersion(w, v)
}
