package front

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/internal/serving"
)

// readBody reads at most limit bytes; a larger body is a 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *openai.Error) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, openai.BadRequest("", "could not read the request body: %v", err)
	}
	return b, nil
}

func tooLarge(limit int64) *openai.Error {
	return openai.NewError(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "",
		"request body larger than %d bytes", limit)
}

// completions serves POST /v1/chat/completions, /v1/completions and /v1/embeddings, and
// /v1/sessions/{session}/chat/completions and /v1/sessions/{session}/completions for an
// AgentSession.
func (s *Server) completions(route openai.Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Credentials are checked before the body is read.
		t, aerr := s.Engine.Authenticate(r.Context(), r.Header)
		if aerr != nil {
			aerr.Write(w)
			s.Engine.Metrics.Requests.WithLabelValues("", itoa(aerr.Status), "http").Inc()
			return
		}
		body, aerr := readBody(w, r, s.MaxBodyBytes)
		if aerr != nil {
			aerr.Write(w)
			s.Engine.Metrics.Rejected.WithLabelValues(aerr.Reason).Inc()
			s.Engine.Metrics.Requests.WithLabelValues("", itoa(aerr.Status), "http").Inc()
			return
		}
		s.Engine.Handle(r.Context(), engine.Inbound{Route: route, Header: r.Header, Body: body, Protocol: "http", Tenant: t,
			Session: r.PathValue("session")},
			newHTTPSink(w))
	}
}

// models serves GET /v1/models: the models the caller may use.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	t, aerr := s.Engine.Authenticate(r.Context(), r.Header)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	ids := s.Engine.Models(t)
	data := make([]model, len(ids))
	for i, id := range ids {
		data[i] = model{ID: id, Object: "model", OwnedBy: "neuronetes"}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// httpSink writes SSE for streamed responses and JSON otherwise. The server's serving.Stream
// policy bounds each write: a client that stops reading is dropped after WriteTimeout, while a
// slow one holds the backend back through the bounded buffers.
type httpSink struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	wf  serving.WriteFlusher // w's, when it is one (the API server's writers are)
	buf []byte
}

// newHTTPSink returns the sink of w, its WriteFlusher looked up once per response.
func newHTTPSink(w http.ResponseWriter) *httpSink {
	wf, _ := w.(serving.WriteFlusher)
	return &httpSink{w: w, rc: http.NewResponseController(w), wf: wf}
}

var (
	sseData = []byte("data: ")
	sseEnd  = []byte("\n\n")
	sseDone = []byte("data: [DONE]\n\n")
)

// Start writes the header without sending it: the engine sends the first event right after
// Start, and the header leaves with it, in one write to the client's connection.
func (s *httpSink) Start(m engine.Meta) error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	m.Header(h)
	s.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *httpSink) Event(data []byte) error {
	s.buf = append(append(append(s.buf[:0], sseData...), data...), sseEnd...)
	if s.wf != nil {
		return s.wf.WriteFlush(s.buf) // the stall deadline armed once per event
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// BufferEvent writes an event into the response's buffer without sending it
// (engine.EventBuffer); the next event's flush sends both.
func (s *httpSink) BufferEvent(data []byte) error {
	s.buf = append(append(append(s.buf[:0], sseData...), data...), sseEnd...)
	_, err := s.w.Write(s.buf)
	return err
}

// EventFrame sends one event given as its SSE frame (engine.FrameWriter).
func (s *httpSink) EventFrame(frame []byte) error {
	if s.wf != nil {
		return s.wf.WriteFlush(frame)
	}
	if _, err := s.w.Write(frame); err != nil {
		return err
	}
	return s.rc.Flush()
}

// BufferEventFrame writes one event given as its SSE frame without sending it
// (engine.FrameWriter).
func (s *httpSink) BufferEventFrame(frame []byte) error {
	_, err := s.w.Write(frame)
	return err
}

// Flush sends the buffered events (engine.EventBuffer).
func (s *httpSink) Flush() error { return s.rc.Flush() }

func (s *httpSink) Finish() error {
	if _, err := s.w.Write(sseDone); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *httpSink) Response(m engine.Meta, body []byte) error {
	h := s.w.Header()
	h.Set("Content-Type", "application/json")
	m.Header(h)
	s.w.WriteHeader(http.StatusOK)
	_, err := s.w.Write(body)
	return err
}

func (s *httpSink) Fail(m engine.Meta, e *openai.Error, started bool) error {
	if started {
		return s.Event(e.JSON())
	}
	m.Header(s.w.Header())
	if e.Status == 499 {
		return nil // nobody to answer
	}
	e.Write(s.w)
	return nil
}
