package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/proxy"
)

// relayWhole relays a non-streamed response.
func (r *request) relayWhole(ctx context.Context, x *proxy.Exchange) error {
	b, err := x.ReadAll(r.e.Cfg.MaxResponseBytes)
	if err != nil {
		return x.Err(err)
	}
	// The whole answer's latency is not a TTFT: only the backend's own report is, counted from
	// the request's arrival like a stream's (queueing and routing included).
	ttft, ok := proxy.BackendTTFT(x.Resp.Header, r.e.now().Sub(r.sent))
	r.firstToken(r.sent.Sub(r.start)+ttft, ok)
	c, perr := openai.ParseChunk(b)
	if perr == nil {
		fc := r.newFilters(ctx)
		edits, ferr := fc.filterChunk(c, true)
		if ferr != nil {
			return fmt.Errorf("response filter: %w", ferr)
		}
		if why, ok := fc.blocked(); ok {
			r.out.Blocked = why
			if r.e.Cfg.BlockedAsError {
				return blockedError(why)
			}
			b = openai.ContentFilterResponse(r.body.Route, c.ID, c.Model, c.Created, fc.stopped(), c.Usage)
		} else if b, err = openai.EditChoices(b, edits); err != nil {
			return fmt.Errorf("response filter: %w", err)
		}
		r.count(c, true)
	}
	r.account()
	r.out.Status = http.StatusOK
	if err := r.sink.Response(r.meta, b); err != nil {
		return clientGone(err)
	}
	return nil
}

// relayStream relays a streamed response event by event. Nothing is sent to the client before
// the first event, so a failure before it may still be retried on another pod when the client
// sent an idempotency key.
func (r *request) relayStream(ctx context.Context, x *proxy.Exchange) error {
	fc := r.newFilters(ctx)
	var lastID, lastModel string
	usageSent := false
	defer r.settleFirstToken() // a stream that ends or breaks at its first token
	for {
		if r.held && !x.Stream.HasEvent() { // nothing more at hand: send what is held
			if err := r.flushHeld(); err != nil {
				return err
			}
		}
		if !r.held {
			r.settleFirstToken() // the first token has been sent
		}
		data, err := x.Stream.Next()
		if err != nil {
			err = x.Err(err)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			// The backend had the request: another pod may run it only for a client that
			// accepts a second run.
			if !r.started && ctx.Err() == nil && !isTimeout(err) && r.idempotent() {
				return &errRetry{err}
			}
			return r.streamBroke(err)
		}
		if bytes.Equal(data, proxy.Done) {
			return r.endStream(fc, lastID, lastModel, usageSent)
		}
		// Most chunks carry one token and nothing the gateway acts on: without filters they are
		// scanned, not decoded. The first chunk (id, model), usage and error events are decoded.
		if len(fc.fs) == 0 && lastID != "" {
			if sc := scanChunk(data); !sc.decode {
				if sc.token {
					r.usage.chunks++
					r.markFirstToken()
				}
				if err := r.relay(x, data, x.Stream.Frame()); err != nil {
					return err
				}
				continue
			}
		}
		c, perr := openai.ParseChunk(data)
		if perr == nil {
			if c.Error != nil {
				return r.streamBroke(fmt.Errorf("backend error event: %s", c.Error.Message))
			}
			lastID, lastModel = c.ID, c.Model
			if lastID == "" {
				lastID = "-" // decoded once; chunks without an id need no more
			}
			edits, ferr := fc.filterChunk(c, false)
			if ferr != nil {
				return r.streamBroke(fmt.Errorf("response filter: %w", ferr))
			}
			if why, ok := fc.blocked(); ok {
				return r.streamFiltered(fc, why, lastID, lastModel, usageSent)
			}
			if data, err = openai.EditChoices(data, edits); err != nil {
				return r.streamBroke(fmt.Errorf("response filter: %w", err))
			}
			r.count(c, false)
			if c.Usage != nil && len(c.Choices) == 0 {
				if !r.body.IncludeUsage {
					continue // asked for by the gateway only
				}
				usageSent = true
			}
		}
		if err := r.relay(x, data, nil); err != nil {
			return err
		}
	}
}

// relay writes one backend event. When the backend's next event is already buffered and the
// sink can hold events, this one is held and leaves with the next (as a byte-copying proxy
// forwards what one read returned in one write). frame, when not nil, is data's SSE frame as the
// backend sent it, given whole to a FrameWriter sink.
func (r *request) relay(x *proxy.Exchange, data, frame []byte) error {
	if frame == nil || r.fw == nil || !r.started {
		frame = nil
	}
	if r.eb == nil || !r.started || !x.Stream.HasEvent() {
		if frame != nil {
			r.held = false
			if err := r.fw.EventFrame(frame); err != nil {
				return clientGone(err)
			}
			return nil
		}
		return r.send(data)
	}
	var err error
	if frame != nil {
		err = r.fw.BufferEventFrame(frame)
	} else {
		err = r.eb.BufferEvent(data)
	}
	if err != nil {
		return clientGone(err)
	}
	r.held = true
	return nil
}

// flushHeld sends the events the sink holds.
func (r *request) flushHeld() error {
	r.held = false
	if err := r.eb.Flush(); err != nil {
		return clientGone(err)
	}
	return nil
}

// send writes one event, starting the response on the first; it sends what the sink holds too.
func (r *request) send(data []byte) error {
	r.held = false
	if !r.started {
		r.started = true
		r.out.Status = http.StatusOK
		if err := r.sink.Start(r.meta); err != nil {
			return clientGone(err)
		}
	}
	if err := r.sink.Event(data); err != nil {
		return clientGone(err)
	}
	return nil
}

// endStream flushes what the filters still hold, adds usage when the client asked for it and
// the backend gave none, and ends the stream.
func (r *request) endStream(fc *filterChain, id, model string, usageSent bool) error {
	for _, choice := range fc.open() {
		rest, err := fc.closeChoice(choice, nil)
		if err != nil {
			return r.streamBroke(fmt.Errorf("response filter: %w", err))
		}
		if why, ok := fc.blocked(); ok {
			return r.streamFiltered(fc, why, id, model, usageSent)
		}
		if len(rest) == 0 {
			continue
		}
		if err := r.send(r.synthChunk(id, model, choice, rest, nil)); err != nil {
			return err
		}
	}
	r.account()
	if r.body.IncludeUsage && !usageSent {
		u := &openai.Usage{PromptTokens: r.out.PromptTokens, CompletionTokens: r.out.CompletionTokens,
			TotalTokens: r.out.PromptTokens + r.out.CompletionTokens}
		if err := r.send(r.synthChunk(id, model, -1, nil, u)); err != nil {
			return err
		}
	}
	if !r.started {
		if err := r.send(nil); err != nil {
			return err
		}
	}
	if err := r.sink.Finish(); err != nil {
		return clientGone(err)
	}
	return nil
}

// synthChunk builds a chunk of the gateway's own: the pieces of choice (choice >= 0), or usage.
func (r *request) synthChunk(id, model string, choice int, pieces []openai.Piece, u *openai.Usage) []byte {
	obj := "chat.completion.chunk"
	if r.body.Route != openai.RouteChat {
		obj = "text_completion"
	}
	c := map[string]any{"id": id, "object": obj, "created": r.start.Unix(), "model": model, "choices": []any{}}
	if choice >= 0 {
		ch := map[string]any{"index": choice, "finish_reason": nil}
		if r.body.Route == openai.RouteChat {
			ch["delta"] = map[string]any{}
		} else {
			ch["text"] = ""
		}
		c["choices"] = []any{ch}
	}
	if u != nil {
		c["usage"] = u
	}
	b, _ := json.Marshal(c)
	if len(pieces) > 0 {
		b, _ = openai.EditChoices(b, []openai.ChoiceEdit{{Choice: 0, Pieces: pieces}}) // b is the gateway's own JSON
	}
	return b
}

// streamBroke ends a stream that failed after it started (or a non-retryable failure before).
func (r *request) streamBroke(err error) error {
	var ce *clientGoneError
	if errors.As(err, &ce) {
		return err
	}
	r.account()
	kind := "backend"
	switch {
	case isTimeout(err):
		kind = "timeout"
	case errors.As(err, new(*blockError)):
		kind = "blocked"
	}
	r.e.Metrics.StreamErrors.WithLabelValues(r.pool.Ref.String(), kind).Inc()
	if !r.started {
		return err
	}
	var be *blockError
	if errors.As(err, &be) {
		// Only with Config.BlockedAsError: otherwise a block ends the stream with a
		// content_filter chunk (streamFiltered).
		return openai.NewError(http.StatusOK, "content_filter", "response_blocked", "", "%s", be.Error())
	}
	return openai.NewError(http.StatusOK, "server_error", "stream_"+kind, "", "backend stream failed: %v", err)
}

func isTimeout(err error) bool {
	return errors.Is(err, proxy.ErrFirstTokenTimeout) || errors.Is(err, proxy.ErrIdleTimeout) || errors.Is(err, proxy.ErrResponseTimeout)
}

// blockError is a response stopped by a ChunkFilter.
type blockError struct{ why string }

func (b *blockError) Error() string { return "response blocked: " + b.why }

func blockedError(why string) error { return &blockError{why} }

// clientGoneError is a failed write to the client.
type clientGoneError struct{ err error }

func (c *clientGoneError) Error() string { return "client gone: " + c.err.Error() }
func (c *clientGoneError) Unwrap() error { return c.err }

func clientGone(err error) error { return &clientGoneError{err} }

// chunkScan is what one pass over a chunk's JSON found.
type chunkScan struct {
	// decode: the chunk has a "usage" or "error" key, which the relay acts on.
	decode bool
	// token: the first "content", "text", "reasoning_content" or "reasoning" key has a
	// non-empty string, or the first "tool_calls" key a non-empty array.
	token bool
}

// Token keys, indexed by a bit of scanChunk's seen mask: each counts at its first occurrence.
const (
	keyContent = iota
	keyText
	keyToolCalls
	keyReasoningContent
	keyReasoning
)

// scanChunk reports what the relay needs to know of a chunk: whether it has a "usage" or
// "error" key, and whether the first "content", "text", "reasoning_content" or "reasoning" key
// with a string value has a non-empty one, or the first "tool_calls" key with an array value a
// non-empty one. Every key ends in `":`, so it looks for colons and, after a quote, at the key
// before it. Keys inside string values are escaped (\"content\"), so
// they cannot match; the answers are those of bytes.Index on `"content":"` and the others
// (TestScanChunkMatchesReference, FuzzScanChunk).
func scanChunk(data []byte) chunkScan {
	var s chunkScan
	var seen uint8
	for i := 0; ; i++ {
		j := bytes.IndexByte(data[i:], ':') // colons are few in a chunk: IndexByte skips the rest in vector steps
		if j < 0 {
			return s
		}
		if i += j; i < 6 || data[i-1] != '"' {
			continue
		}
		switch data[i-2] { // the last letters of the keys scanKeyEnd knows
		case 'e', 'r', 't', 's', 'g':
			scanKeyEnd(data, i-1, &s, &seen)
		}
	}
}

// scanKeyEnd looks at the key whose closing quote is data[q] (data[q+1] is ':').
func scanKeyEnd(data []byte, q int, s *chunkScan, seen *uint8) {
	if q < 5 {
		return
	}
	var k int
	open := byte('"') // the value's first byte
	switch key := data[:q]; key[q-1] {
	case 'e':
		if hasKey(key, "usage") {
			s.decode = true
		}
		return
	case 'r':
		if hasKey(key, "error") {
			s.decode = true
		}
		return
	case 't':
		switch {
		case hasKey(key, "reasoning_content"):
			k = keyReasoningContent
		case hasKey(key, "content"):
			k = keyContent
		case hasKey(key, "text"):
			k = keyText
		default:
			return
		}
	case 's':
		if !hasKey(key, "tool_calls") {
			return
		}
		k, open = keyToolCalls, '['
	case 'g':
		if !hasKey(key, "reasoning") {
			return
		}
		k = keyReasoning
	default:
		return
	}
	bit := uint8(1) << k
	if *seen&bit != 0 || q+2 >= len(data) || data[q+2] != open {
		return
	}
	*seen |= bit
	closing := byte('"')
	if open == '[' {
		closing = ']'
	}
	if e := q + 3; e < len(data) && data[e] != closing {
		s.token = true
	}
}

// hasKey reports whether key ends in a quote and name.
func hasKey(key []byte, name string) bool {
	n := len(key) - len(name)
	return n >= 1 && key[n-1] == '"' && string(key[n:]) == name
}

// carriesToken reports whether a chunk's JSON has a non-empty content, text or reasoning string,
// or a non-empty tool_calls array ("finish_reason":"tool_calls" names no call).
func carriesToken(data []byte) bool { return scanChunk(data).token }
