package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/neuronetes/neuronetes/demoagent/tokenize"
)

// message is an OpenAI chat message. Content is a string, an array of text parts, or null.
type message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []toolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`

	text string // Content as plain text, filled by validate
}

// tool is an entry of the request's tools.
type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

// toolCall is a function call in an assistant message or response.
type toolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// completionRequest covers the fields of /v1/chat/completions and /v1/completions the demo
// agent acts on; it ignores the others, as vLLM ignores unsupported sampling fields.
type completionRequest struct {
	Model               string          `json:"model"`
	Messages            []message       `json:"messages,omitempty"`
	Prompt              json.RawMessage `json:"prompt,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
	User           string          `json:"user,omitempty"`
	ConversationID string          `json:"conversation_id,omitempty"`
	Tools          []tool          `json:"tools,omitempty"`
	ToolChoice     json.RawMessage `json:"tool_choice,omitempty"`

	promptText string // Prompt as plain text (completions), filled by validate
}

// requestError is a 4xx answer naming the offending field.
type requestError struct {
	status  int
	param   string
	message string
}

func (e *requestError) Error() string { return e.message }

func badRequest(param, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, param: param, message: fmt.Sprintf(format, args...)}
}

// decodeRequest parses and validates a request body.
func decodeRequest(body []byte, chat bool, defaultMax int) (*completionRequest, *requestError) {
	var req completionRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("", "request body is not valid JSON: %v", err)
	}
	if err := req.validate(chat, defaultMax); err != nil {
		return nil, err
	}
	return &req, nil
}

// maxTokens is the request's output limit after validate.
func (r *completionRequest) maxTokens() int { return *r.MaxTokens }

func (r *completionRequest) includeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

func (r *completionRequest) validate(chat bool, defaultMax int) *requestError {
	if r.MaxTokens == nil {
		r.MaxTokens = r.MaxCompletionTokens
	}
	if r.MaxTokens == nil {
		r.MaxTokens = &defaultMax
	}
	if *r.MaxTokens < 1 {
		return badRequest("max_tokens", "max_tokens must be at least 1, got %d", *r.MaxTokens)
	}
	if r.StreamOptions != nil && !r.Stream {
		return badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if !chat {
		text, err := promptText(r.Prompt)
		if err != nil {
			return err
		}
		r.promptText = text
		return nil
	}
	if len(r.Messages) == 0 {
		return badRequest("messages", "messages must not be empty")
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q is not one of system, developer, user, assistant, tool", i, m.Role)
		}
		text, ok := contentText(m.Content)
		if !ok {
			return badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string, an array of text parts, or null", i)
		}
		m.text = text
		if err := m.validateTools(i); err != nil {
			return err
		}
	}
	for i, t := range r.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d] must have type \"function\" and a function.name", i)
		}
	}
	if _, err := r.chosenTool(); err != nil {
		return err
	}
	return nil
}

// validateTools refuses a tool conversation with a missing field, as vLLM's request schema
// does: a tool message needs the tool_call_id it answers; an assistant's tool call needs its
// id, type "function" and function.name.
func (m *message) validateTools(i int) *requestError {
	if m.Role == "tool" && m.ToolCallID == "" {
		return badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "messages[%d]: a tool message requires \"tool_call_id\"", i)
	}
	if len(m.ToolCalls) > 0 && m.Role != "assistant" {
		return badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "messages[%d]: only assistant messages carry \"tool_calls\"", i)
	}
	for j, c := range m.ToolCalls {
		p := fmt.Sprintf("messages[%d].tool_calls[%d]", i, j)
		switch {
		case c.ID == "":
			return badRequest(p+".id", "%s: missing required field \"id\"", p)
		case c.Type != "function":
			return badRequest(p+".type", "%s: \"type\" must be \"function\", got %q", p, c.Type)
		case c.Function.Name == "":
			return badRequest(p+".function.name", "%s: missing required field \"function.name\"", p)
		}
	}
	return nil
}

// promptText accepts a string or an array of strings (joined by newlines).
func promptText(raw json.RawMessage) (string, *requestError) {
	if len(raw) == 0 {
		return "", badRequest("prompt", "prompt is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []string
	if json.Unmarshal(raw, &parts) == nil {
		return strings.Join(parts, "\n"), nil
	}
	return "", badRequest("prompt", "prompt must be a string or an array of strings")
}

// contentText flattens a message content: a string, null, or an array of {"type":"text"} parts.
func contentText(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", false
		}
		b.WriteString(p.Text)
		b.WriteByte(' ')
	}
	return b.String(), true
}

// chosenTool returns the tool a tool call would use: nil when tools are absent or tool_choice is
// "none", the named one for a named tool_choice, else the first.
func (r *completionRequest) chosenTool() (*tool, *requestError) {
	if len(r.Tools) == 0 {
		return nil, nil
	}
	var mode string
	if len(r.ToolChoice) > 0 && json.Unmarshal(r.ToolChoice, &mode) == nil {
		switch mode {
		case "none":
			return nil, nil
		case "auto", "required":
			return &r.Tools[0], nil
		default:
			return nil, badRequest("tool_choice", "tool_choice %q is not none, auto, required or a function", mode)
		}
	}
	if len(r.ToolChoice) == 0 {
		return &r.Tools[0], nil
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(r.ToolChoice, &named); err != nil || named.Function.Name == "" {
		return nil, badRequest("tool_choice", "tool_choice must be a string or {\"type\":\"function\",\"function\":{\"name\":...}}")
	}
	for i := range r.Tools {
		if r.Tools[i].Function.Name == named.Function.Name {
			return &r.Tools[i], nil
		}
	}
	return nil, badRequest("tool_choice", "tool_choice names function %q, which is not in tools", named.Function.Name)
}

// forcesCall reports whether tool_choice forces a tool call: "required" or a named function.
func (r *completionRequest) forcesCall() bool {
	if len(r.Tools) == 0 || len(r.ToolChoice) == 0 {
		return false
	}
	var mode string
	if json.Unmarshal(r.ToolChoice, &mode) == nil {
		return mode == "required"
	}
	return true // a named function (chosenTool checked it)
}

// conversationID is the session key of a request: the X-Conversation-ID or X-Session-ID header,
// else the body's conversation_id, else user.
func conversationID(r *http.Request, req *completionRequest) string {
	for _, v := range []string{r.Header.Get("X-Conversation-ID"), r.Header.Get("X-Session-ID"), req.ConversationID, req.User} {
		if v != "" {
			return v
		}
	}
	return ""
}

// renderChat tokenizes messages with the chat template; an assistant message's tool calls count
// as its text.
func renderChat(msgs []message) []uint64 {
	tm := make([]tokenize.Message, len(msgs))
	for i, m := range msgs {
		text := m.text
		for _, c := range m.ToolCalls {
			text += " " + c.Function.Name + " " + c.Function.Arguments
		}
		tm[i] = tokenize.Message{Role: m.Role, Text: text}
	}
	return tokenize.Chat(tm)
}
