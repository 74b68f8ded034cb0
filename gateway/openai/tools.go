package openai

import (
	"encoding/json"
	"fmt"
)

// RoleTools is the TextField role of the caller's tool definitions: chat templates render each
// tool's description and parameter schema into the prompt, so they are the caller's text too.
const RoleTools = "tools"

// ToolDef is what the gateway reads of one entry of a chat request's "tools": the function's
// description and its parameters schema as sent (JSON text; empty when absent or null).
type ToolDef struct {
	// Name is function.name.
	Name string
	// Description is function.description.
	Description string
	// Parameters is function.parameters as sent, a JSON schema.
	Parameters string
}

// wireTool is the decoding shape of one tools entry.
type wireTool struct {
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// toolShape is what checkKeys walks of a tools entry (parameters is read as one text, so its
// keys need no check: both spellings of a key are in the text the guard reads).
var toolShape = &shape{fields: map[string]*shape{"type": nil, "function": {fields: map[string]*shape{
	"name": nil, "description": nil, "parameters": nil}}}}

// parseTools keeps the decoded tool definitions of a chat request.
func (r *Request) parseTools(ws []wireTool) {
	if len(ws) == 0 {
		return
	}
	r.Tools = make([]ToolDef, len(ws))
	for i, w := range ws {
		t := ToolDef{Name: w.Function.Name, Description: w.Function.Description}
		if p := w.Function.Parameters; len(p) > 0 && string(p) != "null" {
			t.Parameters = string(p)
		}
		r.Tools[i] = t
	}
}

// toolFields lists the non-empty descriptions and parameter schemas of the tool definitions.
func (r *Request) toolFields() []TextField {
	var out []TextField
	for j, t := range r.Tools {
		if t.Description != "" {
			out = append(out, TextField{Ref: TextRef{Kind: KindToolDescription, Message: -1, Index: j}, Role: RoleTools, Text: t.Description})
		}
		if t.Parameters != "" {
			out = append(out, TextField{Ref: TextRef{Kind: KindToolParameters, Message: -1, Index: j}, Role: RoleTools, Text: t.Parameters})
		}
	}
	return out
}

// setToolText replaces tools[ref.Index].function.description, or its parameters with text,
// which must still be JSON (a redaction inside the schema's strings keeps it so). Every other
// byte of the tools array is kept as sent.
func (r *Request) setToolText(ref TextRef, text string) error {
	if ref.Index < 0 || ref.Index >= len(r.Tools) {
		return fmt.Errorf("tools[%d] out of range [0,%d)", ref.Index, len(r.Tools))
	}
	key, val := "description", quote(text)
	if ref.Kind == KindToolParameters {
		if !json.Valid([]byte(text)) {
			return fmt.Errorf("tools[%d].function.parameters: the edited schema is not JSON", ref.Index)
		}
		key, val = "parameters", json.RawMessage(text)
	}
	arr, err := editArray([]byte(`{"tools":`+string(r.Field("tools"))+`}`), "tools", ref.Index, func(tool []byte) ([]byte, error) {
		fn := memberValue(tool, "function")
		if len(fn) == 0 || fn[0] != '{' {
			return nil, fmt.Errorf("no function object")
		}
		fn, err := spliceObject(fn, map[string]json.RawMessage{key: val})
		if err != nil {
			return nil, err
		}
		return spliceObject(tool, map[string]json.RawMessage{"function": fn})
	})
	if err != nil {
		return err
	}
	r.Set("tools", memberValue(arr, "tools"))
	if ref.Kind == KindToolParameters {
		r.Tools[ref.Index].Parameters = text
	} else {
		r.Tools[ref.Index].Description = text
	}
	return nil
}
