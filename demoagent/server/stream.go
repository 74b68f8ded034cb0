package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/neuronetes/neuronetes/demoagent/tokenize"
)

// generation is what a request will produce: text tokens "tok0 tok1 ...", or a tool call whose
// first token carries the function name and the rest its JSON arguments in 4-byte fragments.
type generation struct {
	tokens int
	call   *toolCall // nil for text
	frags  []string  // argument fragments of call
}

// plan decides the output of a request. As vLLM does, a request that forces a call (tool_choice
// "required" or a named function) gets one; with tool_choice "auto" (or none given) the model
// may call: the demo agent calls when ToolCalls is on (vLLM's --enable-auto-tool-choice) and
// the conversation does not end with a tool's result, which it answers with text.
func (s *Server) plan(req *completionRequest, chat bool) (*generation, *requestError) {
	if !chat {
		return &generation{tokens: req.maxTokens()}, nil
	}
	t, rerr := req.chosenTool()
	if rerr != nil || t == nil {
		return &generation{tokens: req.maxTokens()}, rerr
	}
	if !req.forcesCall() && (!s.cfg.ToolCalls || req.Messages[len(req.Messages)-1].Role == "tool") {
		return &generation{tokens: req.maxTokens()}, nil
	}
	c := &toolCall{ID: "chatcmpl-tool-" + strconv.FormatInt(s.nextID.Add(1), 10), Type: "function"}
	c.Function.Name = t.Function.Name
	c.Function.Arguments = exampleArguments(t.Function.Parameters)
	g := &generation{call: c}
	for a := c.Function.Arguments; a != ""; {
		n := min(4, len(a))
		g.frags = append(g.frags, a[:n])
		a = a[n:]
	}
	g.tokens = 1 + len(g.frags)
	return g, nil
}

// exampleArguments fills each property of a JSON-schema object with a value of its type.
func exampleArguments(schema json.RawMessage) string {
	var s struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	args := map[string]any{}
	for name, p := range s.Properties {
		switch p.Type {
		case "integer", "number":
			args[name] = 1
		case "boolean":
			args[name] = true
		case "array":
			args[name] = []any{}
		case "object":
			args[name] = map[string]any{}
		default:
			args[name] = "demo"
		}
	}
	b, _ := json.Marshal(args) // map keys are sorted: the arguments are deterministic
	return string(b)
}

// text is the whole answer as a string.
func (g *generation) text() string {
	if g.call != nil {
		return g.call.Function.Name + " " + g.call.Function.Arguments
	}
	return tokenize.Output(g.tokens)
}

// outputIDs are the generated token ids, as the next turn's prompt will tokenize them.
func (g *generation) outputIDs() []uint64 {
	if g.call != nil {
		return tokenize.Append(nil, g.text())
	}
	return tokenize.OutputIDs(g.tokens)
}

func (g *generation) finishReason() string {
	if g.call != nil {
		return "tool_calls"
	}
	return "length"
}

// finishLabel is vLLM's finished_reason label: a tool call ends the sequence with a stop.
func (g *generation) finishLabel() string {
	if g.call != nil {
		return "stop"
	}
	return "length"
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// usage is OpenAI's usage object; context_tokens (the whole prompt, sidecar memory included) is
// the demo agent's own addition.
type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
	ContextTokens       int            `json:"context_tokens"`
}

// responder writes one response, streamed or whole.
type responder struct {
	w       http.ResponseWriter
	fl      http.Flusher
	req     *completionRequest
	chat    bool
	gen     *generation
	id      string
	model   string
	created int64

	chunkHead, chunkTail, scratch []byte // textChunk's
}

func (s *Server) newResponder(w http.ResponseWriter, req *completionRequest, chat bool, gen *generation) *responder {
	fl, _ := w.(http.Flusher)
	return &responder{w: w, fl: fl, req: req, chat: chat, gen: gen, id: s.newID(chat), model: s.cfg.Model, created: s.clk.Now().Unix()}
}

// begin sends a stream's headers at once, as vLLM does before its first token.
func (o *responder) begin() {
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	o.w.WriteHeader(http.StatusOK)
	o.flush()
}

func (o *responder) flush() {
	if o.fl != nil {
		o.fl.Flush()
	}
}

func (o *responder) object() string {
	switch {
	case !o.chat:
		return "text_completion"
	case o.req.Stream:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

// event writes one server-sent event carrying choices (and usage when not nil).
func (o *responder) event(choices []any, u *usage) error {
	chunk := map[string]any{"id": o.id, "object": o.object(), "created": o.created, "model": o.model, "choices": choices}
	if u != nil {
		chunk["usage"] = u
	}
	b, _ := json.Marshal(chunk)
	if _, err := fmt.Fprintf(o.w, "data: %s\n\n", b); err != nil {
		return err
	}
	o.flush()
	return nil
}

// token sends token i of a stream; a whole response is written by finish.
func (o *responder) token(i int) error {
	if !o.req.Stream {
		return nil
	}
	if o.gen.call == nil {
		return o.textChunk(i)
	}
	if !o.chat {
		return o.event([]any{map[string]any{"index": 0, "text": tokenize.OutputToken(i), "logprobs": nil, "finish_reason": nil}}, nil)
	}
	delta := map[string]any{}
	switch c := o.gen.call; {
	case c == nil:
		delta["content"] = tokenize.OutputToken(i)
	case i == 0:
		idx := 0
		head := toolCall{Index: &idx, ID: c.ID, Type: c.Type}
		head.Function.Name = c.Function.Name
		delta["tool_calls"] = []toolCall{head}
	default:
		idx := 0
		frag := toolCall{Index: &idx}
		frag.Function.Arguments = o.gen.frags[i-1]
		delta["tool_calls"] = []toolCall{frag}
	}
	if i == 0 {
		delta["role"] = "assistant"
	}
	return o.event([]any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": nil}}, nil)
}

// textChunk writes a text token's chunk from a prefix and suffix built once per response: the
// same JSON as event's (keys in the same order), without marshalling a map per token.
func (o *responder) textChunk(i int) error {
	if o.chunkHead == nil {
		head, _ := json.Marshal(map[string]any{"id": o.id, "object": o.object(), "created": o.created, "model": o.model})
		head = head[:len(head)-1] // reopen the object
		if o.chat {
			o.chunkHead = append([]byte("data: "), `{"choices":[{"delta":{"content":`...)
			o.chunkTail = []byte(`},"finish_reason":null,"index":0,"logprobs":null}],` + string(head[1:]) + "}\n\n")
		} else {
			o.chunkHead = append([]byte("data: "), `{"choices":[{"finish_reason":null,"index":0,"logprobs":null,"text":`...)
			o.chunkTail = []byte(`}],` + string(head[1:]) + "}\n\n")
		}
	}
	tok, _ := json.Marshal(tokenize.OutputToken(i))
	buf := append(append(o.scratch[:0], o.chunkHead...), tok...)
	if o.chat && i == 0 {
		buf = append(buf, `,"role":"assistant"`...)
	}
	buf = append(buf, o.chunkTail...)
	o.scratch = buf
	if _, err := o.w.Write(buf); err != nil {
		return err
	}
	o.flush()
	return nil
}

// finish ends the response: a stream gets its finish_reason chunk, the usage chunk when asked
// for, and [DONE]; a whole response is written here.
func (o *responder) finish(u usage) {
	reason := o.gen.finishReason()
	if o.req.Stream {
		choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": reason}
		if o.chat {
			choice["delta"] = map[string]any{}
		} else {
			choice["text"] = ""
		}
		_ = o.event([]any{choice}, nil)
		if o.req.includeUsage() {
			_ = o.event([]any{}, &u)
		}
		_, _ = fmt.Fprint(o.w, "data: [DONE]\n\n")
		o.flush()
		return
	}
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": reason}
	switch {
	case !o.chat:
		choice["text"] = o.gen.text()
	case o.gen.call != nil:
		choice["message"] = map[string]any{"role": "assistant", "content": nil, "tool_calls": []toolCall{*o.gen.call}}
	default:
		choice["message"] = map[string]any{"role": "assistant", "content": o.gen.text()}
	}
	writeJSON(o.w, http.StatusOK, map[string]any{"id": o.id, "object": o.object(), "created": o.created, "model": o.model,
		"choices": []any{choice}, "usage": u})
}

// fail ends the response the way an injected failure of mode does.
func (o *responder) fail(mode FailMode) {
	if mode == FailDisconnect {
		panic(http.ErrAbortHandler) // the server drops the connection without ending the response
	}
	msg := "injected failure (--fail-mode=midstream)"
	if !o.req.Stream {
		writeError(o.w, &requestError{status: http.StatusInternalServerError, message: msg})
		return
	}
	b, _ := json.Marshal(map[string]any{"error": errorBody(http.StatusInternalServerError, "", msg)})
	_, _ = fmt.Fprintf(o.w, "data: %s\n\ndata: [DONE]\n\n", b)
	o.flush()
}

func errorBody(status int, param, msg string) map[string]any {
	typ := "invalid_request_error"
	switch {
	case status >= 500:
		typ = "internal_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	}
	var p any
	if param != "" {
		p = param
	}
	return map[string]any{"message": msg, "type": typ, "param": p, "code": status}
}

// writeError answers an OpenAI-style error.
func writeError(w http.ResponseWriter, e *requestError) {
	writeJSON(w, e.status, map[string]any{"error": errorBody(e.status, e.param, e.message)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
