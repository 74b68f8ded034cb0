package openai

import (
	"encoding/json"
	"fmt"
)

// TextKind says where in a request a text sits.
type TextKind int

// The kinds of request text.
const (
	// KindContent is a message's content string (Index -1) or its text part Index.
	KindContent TextKind = iota
	// KindToolArguments is tool_calls[Index].function.arguments of a message.
	KindToolArguments
	// KindPrompt is the completions prompt or the embeddings input: the string (Index -1) or
	// the array's string Index.
	KindPrompt
	// KindToolDescription is tools[Index].function.description of a chat request.
	KindToolDescription
	// KindToolParameters is tools[Index].function.parameters (its JSON text) of a chat request.
	KindToolParameters
)

// TextRef locates one text of a request.
type TextRef struct {
	// Kind of text.
	Kind TextKind
	// Message indexes Messages (KindContent, KindToolArguments); -1 for the other kinds.
	Message int
	// Index is the part, tool call, tool definition or prompt element; -1 for a whole string.
	Index int
}

// TextField is one text of a request with where it sits.
type TextField struct {
	Ref TextRef
	// Role is the message's role; "prompt" for a completions prompt, "input" for embeddings.
	Role string
	// Text is the text as sent.
	Text string
}

// part is what the gateway reads of a content part.
type part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// TextFields lists every text of the request a caller wrote: of every message (whatever its
// role) the string content or each text part, and each tool call's arguments, then each tool
// definition's description and parameters schema; the prompt or input strings otherwise. Empty
// texts are left out.
func (r *Request) TextFields() []TextField {
	var out []TextField
	if r.Route != RouteChat {
		role := "prompt"
		if r.Route == RouteEmbeddings {
			role = "input"
		}
		for i, p := range r.prompts {
			idx := i
			if !r.promptParts {
				idx = -1
			}
			if p != "" {
				out = append(out, TextField{Ref: TextRef{Kind: KindPrompt, Index: idx}, Role: role, Text: p})
			}
		}
		return out
	}
	for i, m := range r.Messages {
		out = append(out, contentFields(i, m)...)
		for j, c := range m.ToolCalls {
			if c.Arguments != "" {
				out = append(out, TextField{Ref: TextRef{Kind: KindToolArguments, Message: i, Index: j}, Role: m.Role, Text: c.Arguments})
			}
		}
	}
	return append(out, r.toolFields()...)
}

func contentFields(i int, m Message) []TextField {
	if len(m.Content) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		if s == "" {
			return nil
		}
		return []TextField{{Ref: TextRef{Kind: KindContent, Message: i, Index: -1}, Role: m.Role, Text: s}}
	}
	var parts []part
	if json.Unmarshal(m.Content, &parts) != nil {
		return nil
	}
	var out []TextField
	for j, p := range parts {
		if p.Type == "text" && p.Text != "" {
			out = append(out, TextField{Ref: TextRef{Kind: KindContent, Message: i, Index: j}, Role: m.Role, Text: p.Text})
		}
	}
	return out
}

// SetText replaces the text at ref (a ref TextFields returned), keeping every other byte of
// the message, part or prompt as sent.
func (r *Request) SetText(ref TextRef, text string) error {
	if ref.Kind == KindPrompt {
		if ref.Index < 0 || !r.promptParts {
			r.SetPrompt(text)
			return nil
		}
		if ref.Index >= len(r.prompts) {
			return fmt.Errorf("%s[%d] out of range", r.promptField(), ref.Index)
		}
		r.prompts[ref.Index] = text
		r.Prompt = ""
		for _, p := range r.prompts {
			r.Prompt += p
		}
		if r.promptDirty == nil {
			r.promptDirty = map[int]bool{}
		}
		r.promptDirty[ref.Index] = true
		return nil
	}
	if ref.Kind == KindToolDescription || ref.Kind == KindToolParameters {
		return r.setToolText(ref, text)
	}
	if ref.Message < 0 || ref.Message >= len(r.Messages) {
		return fmt.Errorf("message index %d out of range [0,%d)", ref.Message, len(r.Messages))
	}
	if ref.Kind == KindToolArguments {
		return r.editMessage(ref.Message, func(raw []byte) ([]byte, error) {
			return editArray(raw, "tool_calls", ref.Index, func(call []byte) ([]byte, error) {
				fn := memberValue(call, "function")
				if len(fn) == 0 || fn[0] != '{' {
					return nil, fmt.Errorf("tool_calls[%d] has no function object", ref.Index)
				}
				fn, err := setString(fn, "arguments", text)
				if err != nil {
					return nil, err
				}
				return spliceObject(call, map[string]json.RawMessage{"function": fn})
			})
		})
	}
	if ref.Index < 0 {
		return r.SetMessageText(ref.Message, text)
	}
	return r.editMessage(ref.Message, func(raw []byte) ([]byte, error) {
		return editArray(raw, "content", ref.Index, func(p []byte) ([]byte, error) { return setString(p, "text", text) })
	})
}

// editArray applies edit to element i of the array obj[key].
func editArray(obj []byte, key string, i int, edit func([]byte) ([]byte, error)) ([]byte, error) {
	arr := memberValue(obj, key)
	els, err := rawElements(arr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if i < 0 || i >= len(els) {
		return nil, fmt.Errorf("%s[%d] out of range [0,%d)", key, i, len(els))
	}
	el, err := edit(els[i])
	if err != nil {
		return nil, fmt.Errorf("%s[%d]: %w", key, i, err)
	}
	arr, err = spliceArray(arr, map[int]json.RawMessage{i: el})
	if err != nil {
		return nil, err
	}
	return spliceObject(obj, map[string]json.RawMessage{key: arr})
}
