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
	"strings"
)

// Route is the API endpoint a request came in on.
type Route string

// The routes of the OpenAI API the gateway serves.
const (
	RouteChat        Route = "chat"
	RouteCompletions Route = "completions"
)

// Path is the URL path of the route on the model server.
func (r Route) Path() string {
	if r == RouteChat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// Message is one chat message. Content is kept raw: a JSON string or an array of parts.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content,omitempty"`
}

// StreamOptions is the stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Request is a decoded chat/completions or completions body.
type Request struct {
	// Route is the endpoint the request came in on.
	Route Route
	// Model is the requested model id.
	Model string
	// Stream asks for server-sent events.
	Stream bool
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// MaxTokens is max_completion_tokens, else max_tokens; 0 when unset.
	MaxTokens int
	// Messages of a chat request.
	Messages []Message
	// Prompt of a completions request (a string, or the strings of an array joined).
	Prompt string
	// User is the "user" field.
	User string
	// ConversationID is the non-standard "conversation_id" field.
	ConversationID string
	// Metadata is the "metadata" object (string values only).
	Metadata map[string]string

	// fields keeps every top-level field of the body as sent, for re-encoding; decoded from body
	// on first use (most requests are forwarded as sent and never need it).
	fields map[string]json.RawMessage
	// body is the body as sent; raw is the same until the request is changed, then nil.
	body, raw []byte
	// promptParts records whether the completions prompt was an array.
	promptParts bool
}

// wire is the decoding shape of the fields the gateway reads.
type wire struct {
	Model               string            `json:"model"`
	Stream              bool              `json:"stream"`
	StreamOptions       *StreamOptions    `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Messages            []Message         `json:"messages"`
	Prompt              json.RawMessage   `json:"prompt"`
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
	r := &Request{Route: route, Model: w.Model, Stream: w.Stream, Messages: w.Messages, User: w.User,
		ConversationID: w.ConversationID, Metadata: w.Metadata, body: body, raw: body}
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
	if route == RouteChat {
		if len(r.Messages) == 0 {
			return nil, BadRequest("messages", "missing required field \"messages\" (a non-empty array)")
		}
		for i, m := range r.Messages {
			if m.Role == "" {
				return nil, BadRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d]: missing \"role\"", i)
			}
		}
		return r, nil
	}
	if len(w.Prompt) == 0 || string(w.Prompt) == "null" {
		return nil, BadRequest("prompt", "missing required field \"prompt\"")
	}
	p, parts, err := decodePrompt(w.Prompt)
	if err != nil {
		return nil, err
	}
	r.Prompt, r.promptParts = p, parts
	return r, nil
}

func decodePrompt(raw json.RawMessage) (string, bool, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, false, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		return strings.Join(ss, ""), true, nil
	}
	return "", false, BadRequest("prompt", "\"prompt\" must be a string or an array of strings")
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

// PromptText is the whole prompt as one text: every message as "role: text" lines, or the
// completions prompt. Conversations that extend each other give texts that extend each other.
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

// SetMessageText replaces the text of message i (string content; every text part of an array is
// replaced in order by the matching line of text when the counts agree, else the array becomes
// one text part).
func (r *Request) SetMessageText(i int, text string) error {
	if i < 0 || i >= len(r.Messages) {
		return fmt.Errorf("message index %d out of range [0,%d)", i, len(r.Messages))
	}
	b, err := json.Marshal(text)
	if err != nil {
		return fmt.Errorf("encode message %d: %w", i, err)
	}
	r.Messages[i].Content = b
	r.raw = nil
	return nil
}

// SetPrompt replaces the completions prompt.
func (r *Request) SetPrompt(text string) {
	r.Prompt, r.promptParts, r.raw = text, false, nil
}

// loadFields decodes the top-level fields of the body once (Parse checked it is an object).
func (r *Request) loadFields() {
	if r.fields == nil {
		r.fields = map[string]json.RawMessage{}
		_ = json.Unmarshal(r.body, &r.fields)
	}
}

// Set replaces (or with a nil value removes) a top-level field of the body; the gateway's typed
// fields are not re-read, so Set is for fields the gateway does not route on (e.g. "tools").
func (r *Request) Set(field string, value json.RawMessage) {
	r.loadFields()
	if value == nil {
		delete(r.fields, field)
	} else {
		r.fields[field] = value
	}
	r.raw = nil
}

// Field returns a top-level field as sent (nil when absent).
func (r *Request) Field(name string) json.RawMessage {
	r.loadFields()
	return r.fields[name]
}

// Clone returns a deep copy whose changes do not affect r.
func (r *Request) Clone() *Request {
	r.loadFields()
	c := *r
	c.fields = make(map[string]json.RawMessage, len(r.fields))
	for k, v := range r.fields {
		c.fields[k] = v
	}
	c.Messages = append([]Message(nil), r.Messages...)
	return &c
}

// Body encodes the request for the model server. An unchanged streamed request that already
// asks for usage is returned as sent; otherwise stream_options.include_usage is set to true on
// streamed requests, so the gateway can bill and count from the backend's usage.
func (r *Request) Body() ([]byte, error) {
	if r.raw != nil && (!r.Stream || r.IncludeUsage) {
		return r.raw, nil
	}
	if r.raw != nil && r.Stream {
		if !bytes.Contains(r.raw, []byte(`"stream_options"`)) {
			// Splice the field in after the opening brace: no re-encoding of a large body.
			i := bytes.IndexByte(r.raw, '{')
			out := make([]byte, 0, len(r.raw)+40)
			out = append(out, r.raw[:i+1]...)
			out = append(out, `"stream_options":{"include_usage":true},`...)
			return append(out, r.raw[i+1:]...), nil
		}
	}
	r.loadFields()
	f := make(map[string]json.RawMessage, len(r.fields)+1)
	for k, v := range r.fields {
		f[k] = v
	}
	if r.Route == RouteChat {
		m, err := json.Marshal(r.Messages)
		if err != nil {
			return nil, fmt.Errorf("encode messages: %w", err)
		}
		f["messages"] = m
	} else {
		p, err := json.Marshal(r.Prompt)
		if err != nil {
			return nil, fmt.Errorf("encode prompt: %w", err)
		}
		f["prompt"] = p
	}
	if r.Stream {
		so := map[string]json.RawMessage{}
		_ = json.Unmarshal(f["stream_options"], &so) // a malformed object is replaced
		so["include_usage"] = json.RawMessage("true")
		b, err := json.Marshal(so)
		if err != nil {
			return nil, fmt.Errorf("encode stream_options: %w", err)
		}
		f["stream_options"] = b
	}
	out, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return out, nil
}
