// Package openai holds the parts of the OpenAI HTTP API the gateway reads and writes: the
// chat/completions and completions request bodies, streamed chunks, usage and error bodies.
//
// The gateway forwards request bodies as the client sent them, unknown fields included; it
// decodes only the fields it routes, bills and filters on, and re-encodes a body only when a
// request stage changed it. Parse refuses bodies that spell a field it reads twice or in another
// case (keys.go), so what the gateway checked is what the model server reads.
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
)

// Route is the API endpoint a request came in on.
type Route string

// The routes of the OpenAI API the gateway serves.
const (
	RouteChat        Route = "chat"
	RouteCompletions Route = "completions"
	RouteEmbeddings  Route = "embeddings"
)

// Path is the URL path of the route on the model server.
func (r Route) Path() string {
	switch r {
	case RouteChat:
		return "/v1/chat/completions"
	case RouteEmbeddings:
		return "/v1/embeddings"
	}
	return "/v1/completions"
}

// Generates reports whether the route produces tokens (chat and completions do; embeddings
// produce vectors only, so no completion tokens are reserved or billed).
func (r Route) Generates() bool { return r != RouteEmbeddings }

// Message is one chat message as sent: the gateway reads its role, content and tool calls, and
// keeps the whole object so that every other field (tool_call_id, name, image parts, fields the
// gateway does not know) reaches the model server byte for byte.
type Message struct {
	// Role is the message role.
	Role string
	// Content is kept raw: a JSON string, an array of parts, null, or absent (nil).
	Content json.RawMessage
	// ToolCalls are the function calls of an assistant message in the history.
	ToolCalls []ToolCall

	// raw is the message object, with the gateway's edits applied.
	raw json.RawMessage
	// text caches Text (set by Parse; nil: not cached). Copies of the message share it.
	text *atomic.Pointer[string]
}

// ToolCall is one entry of a message's tool_calls: what the gateway reads of it.
type ToolCall struct {
	// ID is the call's id.
	ID string
	// Name is function.name.
	Name string
	// Arguments is function.arguments (a JSON text inside a string).
	Arguments string
}

// StreamOptions is the stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Request is a decoded chat/completions, completions or embeddings body.
type Request struct {
	// Route is the endpoint the request came in on.
	Route Route
	// Model is the requested model id.
	Model string
	// Stream asks for server-sent events (never set for embeddings).
	Stream bool
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// MaxTokens is max_completion_tokens, else max_tokens; 0 when unset.
	MaxTokens int
	// Messages of a chat request.
	Messages []Message
	// Tools are the tool definitions of a chat request, as the guardrails read them.
	Tools []ToolDef
	// Prompt of a completions request, or input of an embeddings request (the strings of an
	// array joined).
	Prompt string
	// User is the "user" field.
	User string
	// ConversationID is the non-standard "conversation_id" field.
	ConversationID string
	// Metadata is the "metadata" object (string values only).
	Metadata map[string]string

	// fields keeps every top-level field of the body as sent; decoded from body on first use
	// (most requests are forwarded as sent and never need it).
	fields map[string]json.RawMessage
	// body is the body as sent; it is never modified.
	body []byte
	// set holds the top-level fields replaced by Set (nil: removed).
	set map[string]json.RawMessage
	// messages is the messages array as sent; dirty marks the messages the gateway changed.
	messages json.RawMessage
	dirty    map[int]bool
	// prompts are the prompt's (or input's) strings; promptParts records an array, promptDirty
	// marks changed elements (-1: a string prompt changed).
	prompts     []string
	promptRaw   json.RawMessage
	promptParts bool
	promptDirty map[int]bool
}

// wire is the decoding shape of the fields the gateway reads.
type wire struct {
	Model               string            `json:"model"`
	Stream              bool              `json:"stream"`
	StreamOptions       *StreamOptions    `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Messages            []wireMessage     `json:"messages"`
	Tools               []wireTool        `json:"tools"`
	Prompt              json.RawMessage   `json:"prompt"`
	Input               json.RawMessage   `json:"input"`
	User                string            `json:"user"`
	ConversationID      string            `json:"conversation_id"`
	Metadata            map[string]string `json:"metadata"`
}

// Parse decodes and validates a request body for route. Errors are *Error values with status
// 400 that name the field.
func Parse(route Route, body []byte) (*Request, error) {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, BadRequest("", "request body is not a JSON object")
	}
	if err := checkKeys(body); err != nil {
		return nil, err
	}
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, BadRequest("", "request body is not a JSON object: %v", err)
		}
		return nil, BadRequest(fieldOf(err), "invalid request body: %v", err)
	}
	r := &Request{Route: route, Model: w.Model, Stream: w.Stream, User: w.User,
		ConversationID: w.ConversationID, Metadata: w.Metadata, body: body}
	if w.StreamOptions != nil {
		r.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	switch {
	case w.MaxCompletionTokens != nil:
		r.MaxTokens = *w.MaxCompletionTokens
	case w.MaxTokens != nil:
		r.MaxTokens = *w.MaxTokens
	}
	if r.Model == "" {
		return nil, BadRequest("model", "missing required field \"model\"")
	}
	if r.MaxTokens < 0 {
		return nil, BadRequest("max_tokens", "max_tokens must not be negative, got %d", r.MaxTokens)
	}
	switch route {
	case RouteChat:
		r.parseTools(w.Tools)
		return r, r.parseMessages(body, w.Messages)
	case RouteEmbeddings:
		// Embeddings do not stream; a "stream" field is the model server's to refuse.
		r.Stream, r.IncludeUsage = false, false
		return r, r.parsePrompt("input", w.Input)
	}
	return r, r.parsePrompt("prompt", w.Prompt)
}

// parseMessages pairs the decoded messages with their objects as sent.
func (r *Request) parseMessages(body []byte, ws []wireMessage) error {
	if len(ws) == 0 {
		return BadRequest("messages", "missing required field \"messages\" (a non-empty array)")
	}
	raw := memberValue(body, "messages")
	els, err := rawElements(raw)
	if err != nil || len(els) != len(ws) {
		return BadRequest("messages", "\"messages\" must be an array of objects")
	}
	r.messages = raw
	r.Messages = make([]Message, len(ws))
	for i := range ws {
		m, err := messageFrom(&ws[i], els[i], fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return err
		}
		r.Messages[i] = m
	}
	return nil
}

// wireMessage is what the gateway reads of a message.
type wireMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func parseMessage(raw json.RawMessage, path string) (Message, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return Message{}, BadRequest(path, "%s must be an object", path)
	}
	var w wireMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		f := path
		if name := fieldOf(err); name != "" {
			f = join(path, name)
		}
		return Message{}, BadRequest(f, "%s: %v", path, err)
	}
	return messageFrom(&w, raw, path)
}

// messageFrom checks a decoded message and keeps raw, its object as sent.
func messageFrom(w *wireMessage, raw json.RawMessage, path string) (Message, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return Message{}, BadRequest(path, "%s must be an object", path)
	}
	if w.Role == "" {
		return Message{}, BadRequest(path+".role", "%s: missing \"role\"", path)
	}
	m := Message{Role: w.Role, Content: w.Content, raw: raw, text: new(atomic.Pointer[string])}
	for j, c := range w.ToolCalls {
		tc := ToolCall{ID: c.ID, Name: c.Function.Name}
		if a := c.Function.Arguments; len(a) > 0 && string(a) != "null" {
			if err := json.Unmarshal(a, &tc.Arguments); err != nil {
				f := fmt.Sprintf("%s.tool_calls[%d].function.arguments", path, j)
				return Message{}, BadRequest(f, "%s must be a string (the arguments as JSON text)", f)
			}
		}
		m.ToolCalls = append(m.ToolCalls, tc)
	}
	return m, nil
}

// parsePrompt reads a completions prompt or an embeddings input: a string or an array of
// strings. Token arrays are refused: the gateway's guardrails and quotas read text.
func (r *Request) parsePrompt(field string, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return BadRequest(field, "missing required field %q", field)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		r.Prompt, r.prompts, r.promptRaw = s, []string{s}, raw
		return nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil || len(ss) == 0 {
		return BadRequest(field, "%q must be a string or a non-empty array of strings", field)
	}
	r.Prompt, r.prompts, r.promptRaw, r.promptParts = strings.Join(ss, ""), ss, raw, true
	return nil
}

// fieldOf extracts the field name of a json type error.
func fieldOf(err error) string {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return te.Field
	}
	return ""
}

// Text returns the text of a message: its string content, or its text parts joined by newlines.
func (m Message) Text() string {
	if m.text == nil {
		return m.decodeText()
	}
	if t := m.text.Load(); t != nil {
		return *t
	}
	t := m.decodeText()
	m.text.Store(&t)
	return t
}

// decodeText is Text without the cache: a long prompt's content is decoded once per request
// rather than once per reader (the prefix index, the exact KV index, guardrails).
func (m Message) decodeText() string {
	if len(m.Content) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			continue
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// Raw is the message object as the gateway will send it.
func (m Message) Raw() json.RawMessage { return m.raw }

// MarshalJSON encodes the message as the gateway will send it: the object as received, with the
// gateway's edits; a Message built in code encodes its role and content.
func (m Message) MarshalJSON() ([]byte, error) {
	if m.raw != nil {
		return m.raw, nil
	}
	return json.Marshal(struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content,omitempty"`
	}{m.Role, m.Content})
}

// PromptText is the whole prompt as one text: every message as "role: text" lines, or the
// completions prompt (embeddings input). Conversations that extend each other give texts that
// extend each other.
func (r *Request) PromptText() string {
	if r.Route != RouteChat {
		return r.Prompt
	}
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Text())
		b.WriteByte('\n')
	}
	return b.String()
}

// SetMessageText replaces the whole content of message i with text (a string content); every
// other field of the message is kept as sent.
func (r *Request) SetMessageText(i int, text string) error {
	if i < 0 || i >= len(r.Messages) {
		return fmt.Errorf("message index %d out of range [0,%d)", i, len(r.Messages))
	}
	return r.editMessage(i, func(raw []byte) ([]byte, error) { return setString(raw, "content", text) })
}

// editMessage applies edit to message i's object and re-reads what the gateway reads of it.
func (r *Request) editMessage(i int, edit func([]byte) ([]byte, error)) error {
	raw, err := edit(r.Messages[i].raw)
	if err != nil {
		return fmt.Errorf("edit message %d: %w", i, err)
	}
	m, err := parseMessage(raw, fmt.Sprintf("messages[%d]", i))
	if err != nil {
		return fmt.Errorf("edit message %d: %w", i, err)
	}
	r.Messages[i] = m
	if r.dirty == nil {
		r.dirty = map[int]bool{}
	}
	r.dirty[i] = true
	return nil
}

// SetPrompt replaces the completions prompt (embeddings input) with one string.
func (r *Request) SetPrompt(text string) {
	r.Prompt, r.prompts, r.promptParts = text, []string{text}, false
	r.promptDirty = map[int]bool{-1: true}
}

// loadFields decodes the top-level fields of the body once (Parse checked it is an object).
func (r *Request) loadFields() {
	if r.fields == nil {
		// Parse decoded the body already: the members' spans suffice, without a second decoding
		// of a body whose prompt may be megabytes (the last of duplicate keys wins, as in
		// encoding/json).
		r.fields = map[string]json.RawMessage{}
		ms, _, _ := spans(r.body)
		for _, m := range ms {
			r.fields[m.key] = r.body[m.val:m.end]
		}
	}
}

// Set replaces (or with a nil value removes) a top-level field of the body; the gateway's typed
// fields are not re-read, so Set is for fields the gateway does not route on (e.g. "tools").
func (r *Request) Set(field string, value json.RawMessage) {
	if r.set == nil {
		r.set = map[string]json.RawMessage{}
	}
	r.set[field] = value
}

// SetMetadata sets metadata[key] to value, in place: the rest of the metadata object (or a new
// one) is kept as sent, and Metadata is updated.
func (r *Request) SetMetadata(key, value string) error {
	m := r.Field("metadata")
	if len(m) == 0 || m[0] != '{' {
		m = json.RawMessage("{}")
	}
	b, err := setString(m, key, value)
	if err != nil {
		return fmt.Errorf("set metadata.%s: %w", key, err)
	}
	r.Set("metadata", b)
	md := maps.Clone(r.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md[key] = value
	r.Metadata = md
	return nil
}

// Field returns a top-level field as sent, or as Set replaced it (nil when absent). Edits of
// messages and prompts are read through Messages, Prompt and TextFields.
func (r *Request) Field(name string) json.RawMessage {
	if v, ok := r.set[name]; ok {
		return v
	}
	r.loadFields()
	return r.fields[name]
}

// Clone returns a deep copy whose changes do not affect r.
func (r *Request) Clone() *Request {
	c := *r
	c.set = maps.Clone(r.set)
	c.dirty = maps.Clone(r.dirty)
	c.promptDirty = maps.Clone(r.promptDirty)
	c.prompts = slices.Clone(r.prompts)
	c.Messages = slices.Clone(r.Messages)
	c.Tools = slices.Clone(r.Tools)
	for i := range c.Messages {
		c.Messages[i].ToolCalls = slices.Clone(c.Messages[i].ToolCalls)
	}
	return &c
}

// Body encodes the request for the model server. The body is the one the client sent with the
// gateway's edits spliced in: changed message contents, text parts and tool-call arguments,
// changed prompt strings, fields replaced by Set, and stream_options.include_usage set to true on
// a streamed request (so the gateway can bill from the backend's usage). Every byte the gateway
// did not change is sent as received; an unchanged request is sent as it came.
func (r *Request) Body() ([]byte, error) {
	edits := maps.Clone(r.set)
	if edits == nil {
		edits = map[string]json.RawMessage{}
	}
	if len(r.dirty) > 0 {
		ms := make(map[int]json.RawMessage, len(r.dirty))
		for i := range r.dirty {
			ms[i] = r.Messages[i].raw
		}
		b, err := spliceArray(r.messages, ms)
		if err != nil {
			return nil, fmt.Errorf("encode messages: %w", err)
		}
		edits["messages"] = b
	}
	if len(r.promptDirty) > 0 {
		b, err := r.promptValue()
		if err != nil {
			return nil, err
		}
		edits[r.promptField()] = b
	}
	if r.Stream && !r.IncludeUsage {
		if _, ok := edits["stream_options"]; !ok {
			so := r.Field("stream_options")
			if len(so) == 0 || so[0] != '{' {
				so = json.RawMessage("{}")
			}
			b, err := spliceObject(so, map[string]json.RawMessage{"include_usage": json.RawMessage("true")})
			if err != nil {
				return nil, fmt.Errorf("encode stream_options: %w", err)
			}
			edits["stream_options"] = b
		}
	}
	if len(edits) == 0 {
		return r.body, nil
	}
	out, err := spliceObject(r.body, edits)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return out, nil
}

func (r *Request) promptField() string {
	if r.Route == RouteEmbeddings {
		return "input"
	}
	return "prompt"
}

// promptValue is the prompt (input) with its changed strings spliced in.
func (r *Request) promptValue() (json.RawMessage, error) {
	if r.promptDirty[-1] || !r.promptParts {
		return quote(r.Prompt), nil
	}
	es := make(map[int]json.RawMessage, len(r.promptDirty))
	for i := range r.promptDirty {
		es[i] = quote(r.prompts[i])
	}
	b, err := spliceArray(r.promptRaw, es)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", r.promptField(), err)
	}
	return b, nil
}
