package front

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// WebSocket protocol (docs/gateway.md): the client opens GET /v1/chat/completions (or
// /v1/completions) with Upgrade: websocket and its credentials and session headers. Each text
// message it sends is one request body; the gateway answers it in order with a meta message
// {"object":"neuronetes.meta",...}, then the chunks an SSE client receives (one message each)
// and the message [DONE]; a non-streamed request gets the meta and one message with the whole
// response; an error is one {"error":{...}} message. Closing the socket cancels the request in
// flight. The gateway closes a socket whose credential lapses (1008) or that idles (1001), see
// wsGuard.

// wsMeta is the first message of each answer.
type wsMeta struct {
	Object    string `json:"object"`
	RequestID string `json:"request_id"`
	Pool      string `json:"pool,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Pin       string `json:"pin,omitempty"`
	Gateway   string `json:"gateway,omitempty"`
}

// websocketHandler serves the upgrade.
func (s *Server) websocketHandler(route openai.Route, w http.ResponseWriter, r *http.Request) {
	t, aerr := s.Engine.Authenticate(r.Context(), r.Header)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.WebSocketOrigins})
	if err != nil {
		klog.FromContext(r.Context()).V(2).Info("WebSocket upgrade failed", "err", err)
		return
	}
	s.ws.Add(1)
	defer s.ws.Done()
	c.SetReadLimit(s.MaxBodyBytes)
	// The connection lives until the socket closes or a shutdown runs out of time.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stop := context.AfterFunc(s.wsCtx, cancel)
	defer stop()
	g := newWSGuard(s, c, r.Header, t)
	go g.watch(ctx)
	msgs := make(chan []byte)
	go func() {
		defer cancel()
		defer close(msgs)
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ != websocket.MessageText {
				_ = c.Close(websocket.StatusUnsupportedData, "requests are JSON text messages")
				return
			}
			g.touch()
			select {
			case msgs <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	for b := range msgs {
		if s.draining.Load() {
			_ = c.Close(websocket.StatusGoingAway, "gateway shutting down; reconnect")
			return
		}
		if !g.check(ctx) {
			return
		}
		sink := &wsSink{c: c, ctx: ctx, timeout: s.WriteTimeout}
		g.answering(true)
		s.Engine.Handle(ctx, engine.Inbound{Route: route, Header: r.Header, Body: b, Protocol: "websocket", Tenant: g.tenant.Load()}, sink)
		g.answering(false)
		if sink.err != nil {
			break
		}
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
}

// wsSink writes one answer as WebSocket messages.
type wsSink struct {
	c       *websocket.Conn
	ctx     context.Context
	timeout time.Duration
	err     error
}

func (s *wsSink) write(b []byte) error {
	if s.err != nil {
		return s.err
	}
	ctx := s.ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	s.err = s.c.Write(ctx, websocket.MessageText, b)
	return s.err
}

func (s *wsSink) meta(m engine.Meta) error {
	b, _ := json.Marshal(wsMeta{Object: "neuronetes.meta", RequestID: m.RequestID, Pool: m.Pool, Pod: m.Pod, Pin: m.Pin, Gateway: m.Gateway})
	return s.write(b)
}

func (s *wsSink) Start(m engine.Meta) error { return s.meta(m) }
func (s *wsSink) Event(data []byte) error   { return s.write(data) }
func (s *wsSink) Finish() error             { return s.write([]byte("[DONE]")) }
func (s *wsSink) Fail(m engine.Meta, e *openai.Error, started bool) error {
	if e.Status == 499 {
		return nil
	}
	return s.write(e.JSON())
}

func (s *wsSink) Response(m engine.Meta, body []byte) error {
	if err := s.meta(m); err != nil {
		return err
	}
	return s.write(body)
}
