package openai

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// The text fields of a response choice that carry model text, as named in the JSON.
const (
	// FieldContent is the delta's or message's content (a completion's "text").
	FieldContent = "content"
	// FieldReasoningContent is vLLM's reasoning_content; FieldReasoning its newer name.
	FieldReasoningContent = "reasoning_content"
	FieldReasoning        = "reasoning"
	// FieldToolArguments is tool_calls[].function.arguments.
	FieldToolArguments = "tool_calls.function.arguments"
)

// Piece is one text of a response choice: the content, the reasoning, or one tool call's
// arguments.
type Piece struct {
	// Field is one of the Field* names.
	Field string
	// Tool identifies the tool call of FieldToolArguments: its "index" (streamed deltas carry
	// one), else its position in tool_calls.
	Tool int
	// Text is the piece's text (a fragment of it in a streamed chunk).
	Text string
}

// Part numbers the piece among its choice's pieces: content 0, reasoning_content 1,
// reasoning 2, tool call k 3+k. Pieces of one choice that share a part continue each other
// across a stream's chunks.
func (p Piece) Part() int {
	switch p.Field {
	case FieldReasoningContent:
		return 1
	case FieldReasoning:
		return 2
	case FieldToolArguments:
		return 3 + p.Tool
	}
	return 0
}

// PieceOfPart is the piece (without text) that Part numbered part.
func PieceOfPart(part int) Piece {
	switch {
	case part == 1:
		return Piece{Field: FieldReasoningContent}
	case part == 2:
		return Piece{Field: FieldReasoning}
	case part >= 3:
		return Piece{Field: FieldToolArguments, Tool: part - 3}
	}
	return Piece{Field: FieldContent}
}

// wireToolCall is what the gateway reads of a response tool call.
type wireToolCall struct {
	Index    *int `json:"index"`
	Function struct {
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolKey is a tool call's identity: its index, else its position.
func toolKey(tc wireToolCall, pos int) int {
	if tc.Index != nil {
		return *tc.Index
	}
	return pos
}

// Pieces lists the choice's texts: always the content (possibly empty), then the reasoning
// and every tool call's arguments that are not empty.
func (c *Choice) Pieces() []Piece {
	out := []Piece{{Field: FieldContent, Text: c.Content()}}
	d := c.Delta
	if d == nil {
		d = c.Message
	}
	if d == nil {
		return out
	}
	if d.ReasoningContent != "" {
		out = append(out, Piece{Field: FieldReasoningContent, Text: d.ReasoningContent})
	}
	if d.Reasoning != "" {
		out = append(out, Piece{Field: FieldReasoning, Text: d.Reasoning})
	}
	var calls []wireToolCall
	if len(d.ToolCalls) > 0 && json.Unmarshal(d.ToolCalls, &calls) == nil {
		for i, tc := range calls {
			if tc.Function.Arguments != "" {
				out = append(out, Piece{Field: FieldToolArguments, Tool: toolKey(tc, i), Text: tc.Function.Arguments})
			}
		}
	}
	return out
}

// ChoiceEdit is what a filter changed in the choice at position Choice of a chunk's choices.
type ChoiceEdit struct {
	// Choice is the position in the choices array (not the choice's index field).
	Choice int
	// Pieces are the new texts, a piece that is absent from the chunk is added.
	Pieces []Piece
	// DropLogprobs sets the choice's logprobs to null: its tokens are text the filter changed
	// or has not let through yet.
	DropLogprobs bool
}

// EditChoices applies edits to a chunk or whole response, keeping every other byte of data as
// sent.
func EditChoices(data []byte, edits []ChoiceEdit) ([]byte, error) {
	if len(edits) == 0 {
		return data, nil
	}
	choices := memberValue(data, "choices")
	els, err := rawElements(choices)
	if err != nil {
		return nil, fmt.Errorf("decode choices: %w", err)
	}
	repl := map[int]json.RawMessage{}
	for _, e := range edits {
		if e.Choice < 0 || e.Choice >= len(els) {
			return nil, fmt.Errorf("choice %d out of range [0,%d)", e.Choice, len(els))
		}
		obj, err := editChoice(els[e.Choice], e)
		if err != nil {
			return nil, fmt.Errorf("choices[%d]: %w", e.Choice, err)
		}
		repl[e.Choice] = obj
	}
	choices, err = spliceArray(choices, repl)
	if err != nil {
		return nil, err
	}
	return spliceObject(data, map[string]json.RawMessage{"choices": choices})
}

func editChoice(obj []byte, e ChoiceEdit) ([]byte, error) {
	var err error
	if e.DropLogprobs {
		if lp := memberValue(obj, "logprobs"); len(lp) > 0 && string(lp) != "null" {
			if obj, err = spliceObject(obj, map[string]json.RawMessage{"logprobs": json.RawMessage("null")}); err != nil {
				return nil, err
			}
		}
	}
	if len(e.Pieces) == 0 {
		return obj, nil
	}
	key := "delta"
	inner := memberValue(obj, key)
	if inner == nil {
		key, inner = "message", memberValue(obj, "message")
	}
	if inner == nil {
		if memberValue(obj, "text") != nil {
			for _, p := range e.Pieces {
				if p.Field == FieldContent {
					return setString(obj, "text", p.Text)
				}
			}
			return obj, nil
		}
		key, inner = "delta", json.RawMessage("{}")
	}
	if len(inner) == 0 || inner[0] != '{' {
		inner = json.RawMessage("{}")
	}
	for _, p := range e.Pieces {
		switch p.Field {
		case FieldToolArguments:
			inner, err = setToolArguments(inner, p.Tool, p.Text)
		default:
			inner, err = setString(inner, p.Field, p.Text)
		}
		if err != nil {
			return nil, err
		}
	}
	return spliceObject(obj, map[string]json.RawMessage{key: inner})
}

// setToolArguments sets the arguments of the tool call identified by tool in a delta or
// message, adding an entry {"index": tool, "function": {"arguments": ...}} when none matches.
func setToolArguments(obj []byte, tool int, text string) ([]byte, error) {
	arr := memberValue(obj, "tool_calls")
	var els []json.RawMessage
	if len(arr) > 0 && arr[0] == '[' {
		var err error
		if els, err = rawElements(arr); err != nil {
			return nil, err
		}
	}
	for i, el := range els {
		var tc wireToolCall
		if json.Unmarshal(el, &tc) != nil || toolKey(tc, i) != tool {
			continue
		}
		fn := memberValue(el, "function")
		if len(fn) == 0 || fn[0] != '{' {
			fn = json.RawMessage("{}")
		}
		fn, err := setString(fn, "arguments", text)
		if err != nil {
			return nil, err
		}
		el, err = spliceObject(el, map[string]json.RawMessage{"function": fn})
		if err != nil {
			return nil, err
		}
		arr, err = spliceArray(arr, map[int]json.RawMessage{i: el})
		if err != nil {
			return nil, err
		}
		return spliceObject(obj, map[string]json.RawMessage{"tool_calls": arr})
	}
	add := fmt.Sprintf(`{"index":%d,"function":{"arguments":%s}}`, tool, quote(text))
	parts := make([]string, 0, len(els)+1)
	for _, el := range els {
		parts = append(parts, string(el))
	}
	parts = append(parts, add)
	return spliceObject(obj, map[string]json.RawMessage{"tool_calls": json.RawMessage("[" + strings.Join(parts, ",") + "]")})
}

// SortPieces orders pieces by part, content first.
func SortPieces(ps []Piece) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Part() < ps[j].Part() })
}

// FinishContentFilter is the finish_reason of a choice a guardrail stopped, as OpenAI sends it.
const FinishContentFilter = "content_filter"

// filteredChoice is a choice that ends with finish_reason content_filter and no text.
func filteredChoice(route Route, index int, streamed bool) map[string]any {
	ch := map[string]any{"index": index, "finish_reason": FinishContentFilter, "logprobs": nil}
	switch {
	case route != RouteChat:
		ch["text"] = ""
	case streamed:
		ch["delta"] = map[string]any{}
	default:
		ch["message"] = map[string]any{"role": "assistant", "content": nil}
	}
	return ch
}

// ContentFilterResponse is the whole (non-streamed) answer to a request a guardrail blocked:
// a chat.completion (text_completion) whose choices carry no text and finish with
// "content_filter", as OpenAI answers a completion its content filter stopped.
func ContentFilterResponse(route Route, id, model string, created int64, choices []int, u *Usage) []byte {
	obj := "chat.completion"
	if route != RouteChat {
		obj = "text_completion"
	}
	if len(choices) == 0 {
		choices = []int{0}
	}
	cs := make([]any, len(choices))
	for i, c := range choices {
		cs[i] = filteredChoice(route, c, false)
	}
	if u == nil {
		u = &Usage{}
	}
	b, _ := json.Marshal(map[string]any{"id": id, "object": obj, "created": created, "model": model, "choices": cs, "usage": u})
	return b
}

// ContentFilterChunk is the last chunk of a streamed choice a guardrail stopped: an empty delta
// with finish_reason "content_filter".
func ContentFilterChunk(route Route, id, model string, created int64, choice int) []byte {
	obj := "chat.completion.chunk"
	if route != RouteChat {
		obj = "text_completion"
	}
	b, _ := json.Marshal(map[string]any{"id": id, "object": obj, "created": created, "model": model,
		"choices": []any{filteredChoice(route, choice, true)}})
	return b
}
