package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Usage is the usage object of a response or of the last streamed chunk.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Delta is the delta of a streamed chat choice, or the message of a whole one.
type Delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
	// ReasoningContent and Reasoning are the model's reasoning (vLLM's reasoning parsers; the
	// newer versions name it "reasoning").
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	Reasoning        string          `json:"reasoning,omitempty"`
	ToolCalls        json.RawMessage `json:"tool_calls,omitempty"`
}

// Choice is one choice of a chunk or of a whole response.
type Choice struct {
	Index        int     `json:"index"`
	Delta        *Delta  `json:"delta,omitempty"`
	Message      *Delta  `json:"message,omitempty"`
	Text         *string `json:"text,omitempty"`
	FinishReason *string `json:"finish_reason"`
	// Logprobs is the choice's logprobs as sent (its tokens are the text again).
	Logprobs json.RawMessage `json:"logprobs,omitempty"`
}

// Content is the text the choice carries: the delta's or message's content, or the text.
func (c *Choice) Content() string {
	switch {
	case c.Delta != nil:
		return c.Delta.Content
	case c.Message != nil:
		return c.Message.Content
	case c.Text != nil:
		return *c.Text
	}
	return ""
}

// SetContent replaces the text the choice carries.
func (c *Choice) SetContent(s string) {
	switch {
	case c.Delta != nil:
		c.Delta.Content = s
	case c.Message != nil:
		c.Message.Content = s
	default:
		c.Text = &s
	}
}

// Chunk is a streamed chunk, or a whole non-streamed response (the same fields are read).
type Chunk struct {
	ID      string   `json:"id,omitempty"`
	Object  string   `json:"object,omitempty"`
	Created int64    `json:"created,omitempty"`
	Model   string   `json:"model,omitempty"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
	// Error is set on error events some servers send inside a stream.
	Error *ErrorBody `json:"error,omitempty"`
}

// ParseChunk decodes one chunk (an SSE data payload or a whole response body).
func ParseChunk(data []byte) (*Chunk, error) {
	var c Chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("decode chunk: %w", err)
	}
	return &c, nil
}

// ErrorBody is the "error" object of an OpenAI error response.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Error is an API error: an HTTP status and an OpenAI error body. It implements error.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Body is the error object.
	Body ErrorBody
	// RetryAfter, when positive, is sent as the Retry-After header (whole seconds, rounded up).
	RetryAfter time.Duration
	// Reason is a short machine-readable cause for metrics (e.g. "quota_tokens").
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Body.Type, e.Body.Message)
}

// JSON is the response body: {"error": {...}}.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(map[string]ErrorBody{"error": e.Body})
	return b
}

// Write sends the error as a JSON response.
func (e *Error) Write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(RetryAfterSeconds(e.RetryAfter)))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// NewError builds an Error. typ is the OpenAI error type, param the field at fault ("" for none).
func NewError(status int, typ, reason, param, format string, args ...any) *Error {
	e := &Error{Status: status, Reason: reason, Body: ErrorBody{Message: fmt.Sprintf(format, args...), Type: typ}}
	if param != "" {
		e.Body.Param = &param
	}
	if reason != "" {
		code := reason
		e.Body.Code = &code
	}
	return e
}

// BadRequest is a 400 invalid_request_error naming param.
func BadRequest(param, format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, "invalid_request_error", "bad_request", param, format, args...)
}
