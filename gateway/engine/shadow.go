package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// mirror starts the shadow copies the Mirrors ask for. Copies never delay the request: each
// runs on its own goroutine under the backend's response timeout, detached from the client, and
// is dropped when ShadowParallel copies are already in flight.
func (r *request) mirror(ctx context.Context) {
	for _, m := range r.e.Ext.Mirrors {
		for _, sh := range m.Shadows(ctx, r.sreq) {
			select {
			case r.e.shadowSem <- struct{}{}:
				go r.e.shadow(klog.NewContext(context.WithoutCancel(ctx), klog.FromContext(ctx)), r.sreq, sh)
			default:
				r.e.Metrics.Shadows.WithLabelValues(sh.Pool.String(), "dropped").Inc()
			}
		}
	}
}

// shadow sends one copy and discards its response.
func (e *Engine) shadow(ctx context.Context, req *stage.Request, sh stage.Shadow) {
	defer func() { <-e.shadowSem }()
	start := e.now()
	out := stage.Outcome{Pool: sh.Pool, Shadow: true}
	defer func() {
		out.Duration = e.now().Sub(start)
		res := "ok"
		if out.Err != "" {
			res = "error"
		}
		e.Metrics.Shadows.WithLabelValues(sh.Pool.String(), res).Inc()
		if sh.Done != nil {
			sh.Done(out)
		}
	}()
	pool, ok := e.Table.Load().Pool(sh.Pool)
	if !ok || len(pool.Endpoints) == 0 {
		out.Err = "shadow pool " + sh.Pool.String() + " has no ready endpoint"
		return
	}
	body := sh.Body
	if body == nil {
		body = req.Body
	}
	b, err := body.Body()
	if err != nil {
		out.Err = err.Error()
		return
	}
	ep, ok := e.Picker.Pick(pool, e.shadowInput(req))
	if !ok {
		out.Err = "no endpoint"
		return
	}
	lease := e.Picker.Load.Acquire(pool.Ref, ep.Pod, openai.EstimateTokens(body.PromptText()))
	defer lease.Release()
	ctx, cancel := context.WithTimeout(ctx, e.Upstream.Timeouts().Response)
	defer cancel()
	h := make(map[string][]string)
	h["Content-Type"] = []string{"application/json"}
	h[HeaderRequestID] = []string{req.ID + "-shadow"}
	x, err := e.Upstream.Send(ctx, ep.Addr, body.Route.Path(), b, h, body.Stream)
	if err != nil {
		out.Err = err.Error()
		return
	}
	defer x.Close()
	out.Pod, out.Status = ep.Pod, 200
	if !body.Stream {
		data, err := x.ReadAll(e.Cfg.MaxResponseBytes)
		if err != nil {
			out.Err = x.Err(err).Error()
		} else if c, err := openai.ParseChunk(data); err == nil {
			out.ToolCalls += toolCalls(c)
		}
		out.TTFT = e.now().Sub(start)
		return
	}
	for {
		data, err := x.Stream.Next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			out.Err = x.Err(err).Error()
			return
		}
		if out.TTFT == 0 {
			out.TTFT = max(e.now().Sub(start), time.Nanosecond)
		}
		if bytes.Equal(data, proxy.Done) {
			return
		}
		if c, err := openai.ParseChunk(data); err == nil {
			out.ToolCalls += toolCalls(c)
			if c.Usage != nil {
				out.PromptTokens, out.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
			}
		}
	}
}

// toolCalls counts the tool calls a chunk starts (entries with an id; later deltas of the same
// call carry none).
func toolCalls(c *openai.Chunk) int {
	n := 0
	for _, ch := range c.Choices {
		for _, d := range []*openai.Delta{ch.Delta, ch.Message} {
			if d == nil || len(d.ToolCalls) == 0 {
				continue
			}
			var calls []struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(d.ToolCalls, &calls) == nil {
				for _, tc := range calls {
					if tc.ID != "" {
						n++
					}
				}
			}
		}
	}
	return n
}

// shadowInput places a copy like a request without a pin.
func (e *Engine) shadowInput(req *stage.Request) pick.Input {
	key := req.SessionKey
	if key == "" {
		key = req.ID
	}
	return pick.Input{RingKey: key}
}
