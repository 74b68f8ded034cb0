package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// mirror starts the shadow copies the Mirrors ask for. Copies never delay the request: each
// runs on its own goroutine under the backend's response timeout, detached from the client, and
// is dropped when ShadowParallel copies are already in flight.
func (r *request) mirror(ctx context.Context) {
	for _, m := range r.e.Ext.Mirrors {
		for _, sh := range m.Shadows(ctx, r.sreq) {
			// The copy is encoded here: the request's body is not safe to read from another
			// goroutine while this one uses it.
			body := sh.Body
			if body == nil {
				body = r.body
			}
			body = withoutSessionKeys(body, r.pool, r.e.Table.Load(), sh.Pool)
			b, err := body.Body()
			if err != nil {
				klog.FromContext(ctx).Error(err, "Shadow copy not encoded", "pool", sh.Pool.String())
				continue
			}
			c := shadowCopy{sh: sh, body: b, route: body.Route, stream: body.Stream, prompt: openai.EstimateTokens(body.PromptText()),
				sreq: shadowRequest(r.sreq, sh)}
			select {
			case r.e.shadowSem <- struct{}{}:
				go r.e.shadow(klog.NewContext(context.WithoutCancel(ctx), klog.FromContext(ctx)), r.sreq.ID, r.sreq.SessionKey, c)
			default:
				r.e.Metrics.Shadows.WithLabelValues(sh.Pool.String(), "dropped").Inc()
			}
		}
	}
}

// withoutSessionKeys returns body without the session key fields of the live pool's and the
// shadow pool's policies (conversation_id, user, metadata.<key>), cloned when it has any. The
// copy is sent without the session headers too, so the shadow pool's agent cannot resolve the
// live conversation and write the copy's turn into its session memory.
func withoutSessionKeys(body *openai.Request, live *route.Pool, snap *route.Snapshot, shadow route.PoolRef) *openai.Request {
	var sources []route.KeySource
	if live != nil {
		sources = append(sources, live.Policy.SessionKeys...)
	}
	if p, ok := snap.Pool(shadow); ok {
		sources = append(sources, p.Policy.SessionKeys...)
	}
	var out *openai.Request
	var meta map[string]json.RawMessage
	for _, s := range sources {
		key, inMeta := strings.CutPrefix(s.Body, "metadata.")
		switch {
		case s.Body == "":
			continue
		case !inMeta && body.Field(s.Body) != nil:
			if out == nil {
				out = body.Clone()
			}
			out.Set(s.Body, nil)
		case inMeta:
			if meta == nil && json.Unmarshal(body.Field("metadata"), &meta) != nil {
				continue
			}
			if _, has := meta[key]; has {
				if out == nil {
					out = body.Clone()
				}
				delete(meta, key)
				b, _ := json.Marshal(meta) // raw values decoded from JSON: cannot fail
				out.Set("metadata", b)
			}
		}
	}
	if out == nil {
		return body
	}
	return out
}

// shadowCopy is one encoded shadow request.
type shadowCopy struct {
	sh     stage.Shadow
	body   []byte
	route  openai.Route
	stream bool
	prompt int
	// sreq is the copy's own stage request (the shadow pool chosen, the request checks' flags
	// so far): the response filters run against it and add their flags to it, not to the
	// client's request.
	sreq *stage.Request
}

// shadowRequest is the stage request of a copy, made on the request's goroutine: the live
// request's flags are copied before its own response filters can add to them.
func shadowRequest(live *stage.Request, sh stage.Shadow) *stage.Request {
	c := *live
	c.Pool, c.Body = sh.Pool, sh.Body
	c.Flags = append([]string(nil), live.Flags...)
	return &c
}

// shadowFilters runs the response filters (the guardrails of the shadow pool's policy) over a
// copy's response, so the copy's outcome carries the guardrail actions the live response of
// that pool would have had; the response is still discarded.
func (e *Engine) shadowFilters(ctx context.Context, sreq *stage.Request) *filterChain {
	fc := &filterChain{closed: map[int]bool{}, seen: map[int]map[int]bool{}}
	for _, f := range e.Ext.Filters {
		if s := f.NewStream(ctx, sreq); s != nil {
			fc.fs = append(fc.fs, s)
		}
	}
	return fc
}

// filterShadow passes a parsed chunk of the copy's response through fc (whole: c is a whole
// response); end closes every open choice. It records a block in out and reports whether the
// copy's response is done.
func filterShadow(fc *filterChain, c *openai.Chunk, whole, end bool, out *stage.Outcome) bool {
	if c != nil {
		if _, err := fc.filterChunk(c, whole); err != nil {
			out.Err = "response filter: " + err.Error()
			return true
		}
	}
	if end {
		for _, choice := range fc.open() {
			if _, err := fc.closeChoice(choice, nil); err != nil {
				out.Err = "response filter: " + err.Error()
				return true
			}
		}
	}
	if why, ok := fc.blocked(); ok {
		out.Blocked = why
		return true
	}
	return false
}

// shadow sends one copy and discards its response.
func (e *Engine) shadow(ctx context.Context, id, sessionKey string, c shadowCopy) {
	defer func() { <-e.shadowSem }()
	sh := c.sh
	start := e.now()
	out := stage.Outcome{Pool: sh.Pool, Shadow: true}
	sreq := c.sreq
	if sreq == nil {
		sreq = &stage.Request{ID: id, SessionKey: sessionKey, Pool: sh.Pool}
	}
	defer func() {
		out.Flags = sreq.Flags
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
	prompt := c.prompt
	ch, ok := e.Picker.Pick(pool, pick.Input{RingKey: sessionKey, PromptTokens: prompt})
	if !ok {
		out.Err = "no endpoint"
		return
	}
	ep := ch.Endpoint
	lease := e.Picker.Load.Acquire(pool.Ref, ep.Pod, prompt, ch.Uncached)
	defer lease.Release()
	ctx, cancel := context.WithTimeout(ctx, e.Upstream.Timeouts().Response)
	defer cancel()
	h := make(map[string][]string)
	h["Content-Type"] = []string{"application/json"}
	h[HeaderRequestID] = []string{id + "-shadow"}
	x, err := e.Upstream.Send(ctx, ep.Addr, c.route.Path(), c.body, h, c.stream)
	if err != nil {
		out.Err = err.Error()
		return
	}
	defer x.Close()
	out.Pod, out.Status = ep.Pod, 200
	if !c.stream {
		data, err := x.ReadAll(e.Cfg.MaxResponseBytes)
		if err != nil {
			out.Err = x.Err(err).Error()
		} else if ch, err := openai.ParseChunk(data); err == nil {
			out.ToolCalls += toolCalls(ch)
			filterShadow(e.shadowFilters(ctx, sreq), ch, true, false, &out)
		}
		if ttft, ok := proxy.BackendTTFT(x.Resp.Header, e.now().Sub(start)); ok {
			out.TTFT = ttft
		}
		return
	}
	fc := e.shadowFilters(ctx, sreq)
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
			lease.FirstToken()
		}
		if bytes.Equal(data, proxy.Done) {
			filterShadow(fc, nil, false, true, &out)
			return
		}
		if ch, err := openai.ParseChunk(data); err == nil {
			out.ToolCalls += toolCalls(ch)
			if ch.Usage != nil {
				out.PromptTokens, out.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
			}
			if filterShadow(fc, ch, false, false, &out) {
				return // blocked: the live response would have stopped here
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
