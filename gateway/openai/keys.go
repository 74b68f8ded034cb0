package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The gateway decodes bodies with encoding/json, which matches object keys to fields without
// regard to case (Unicode folding: "ſtream" is "stream") and lets the last match win, and
// forwards the body as sent to a model server that reads exact keys (vLLM). A body with two
// spellings of a field the gateway reads would be checked with one value and served with the
// other, so checkKeys refuses, at every level the gateway reads:
//   - a key that is a case variant of a field the gateway reads ("Messages", "MODEL");
//   - a field the gateway reads sent twice (exactly or as case variants of each other);
//   - a key sent twice in an object whose keys the gateway reads verbatim (metadata).
//
// Keys the gateway does not read are forwarded untouched and not checked.

// shape is what the gateway reads of a JSON value: the fields of an object (each with the
// shape of its value; nil: the value is not walked), the shape of an array's elements, or, for
// a map-like object, that every key counts (Map).
type shape struct {
	fields map[string]*shape
	elem   *shape
	// Map marks an object decoded as a map: every key is read verbatim.
	Map bool
}

var (
	partShape    = &shape{fields: map[string]*shape{"type": nil, "text": nil}}
	callShape    = &shape{fields: map[string]*shape{"id": nil, "function": {fields: map[string]*shape{"name": nil, "arguments": nil}}}}
	messageShape = &shape{fields: map[string]*shape{"role": nil, "content": {elem: partShape}, "tool_calls": {elem: callShape}}}
	// bodyShape is the request body as the wire structs and Message.Text read it.
	bodyShape = &shape{fields: map[string]*shape{
		"model": nil, "stream": nil, "max_tokens": nil, "max_completion_tokens": nil,
		"stream_options": {fields: map[string]*shape{"include_usage": nil}},
		"messages":       {elem: messageShape},
		"tools":          {elem: toolShape},
		"prompt":         nil, "input": nil, "user": nil, "conversation_id": nil,
		"metadata": {Map: true},
	}}
	// folded maps each shape's folded field names to the exact ones.
	folded = map[*shape]map[string]string{}
)

func init() {
	var index func(s *shape)
	index = func(s *shape) {
		if s == nil || folded[s] != nil {
			return
		}
		m := map[string]string{}
		for name, sub := range s.fields {
			m[foldKey(name)] = name
			index(sub)
		}
		folded[s] = m
		index(s.elem)
	}
	index(bodyShape)
}

// checkKeys walks body (a JSON object) and returns a 400 naming the first key that is sent
// twice or as a case variant of a field the gateway reads. Malformed JSON is left to the
// decoder's error. The walk skips strings with bytes.IndexByte, so it costs a fraction of the
// decoding.
func checkKeys(body []byte) error {
	sc := &keyScanner{b: body}
	err := sc.value(bodyShape, "", 0)
	if _, ok := err.(*Error); ok {
		return err
	}
	return nil
}

// maxDepth bounds nesting as encoding/json does; deeper bodies are left to its error.
const maxDepth = 10000

// errSyntax stops the walk on malformed JSON (the decoder reports it).
var errSyntax = errors.New("malformed JSON")

// keyScanner walks JSON text checking object keys against shapes.
type keyScanner struct {
	b []byte
	i int
}

func (sc *keyScanner) ws() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\r', '\n':
			sc.i++
		default:
			return
		}
	}
}

// value walks one value; s is its shape (nil: walked for its end only).
func (sc *keyScanner) value(s *shape, path string, depth int) error {
	if depth > maxDepth {
		return errSyntax
	}
	sc.ws()
	if sc.i >= len(sc.b) {
		return errSyntax
	}
	switch sc.b[sc.i] {
	case '{':
		return sc.object(s, path, depth)
	case '[':
		return sc.array(s, path, depth)
	case '"':
		_, err := sc.str()
		return err
	}
	for sc.i < len(sc.b) { // a number or a literal
		switch sc.b[sc.i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return nil
		}
		sc.i++
	}
	return nil
}

// str reads a string at sc.i and returns its raw text, quotes included.
func (sc *keyScanner) str() ([]byte, error) {
	start := sc.i
	sc.i++
	for {
		n := bytes.IndexAny(sc.b[sc.i:], `"\\`)
		if n < 0 {
			return nil, errSyntax
		}
		sc.i += n
		if sc.b[sc.i] == '"' {
			sc.i++
			return sc.b[start:sc.i], nil
		}
		sc.i += 2 // an escape: skip the backslash and the byte after it
		if sc.i > len(sc.b) {
			return nil, errSyntax
		}
	}
}

func (sc *keyScanner) array(s *shape, path string, depth int) error {
	sc.i++
	var elem *shape
	if s != nil {
		elem = s.elem
	}
	sc.ws()
	if sc.i < len(sc.b) && sc.b[sc.i] == ']' {
		sc.i++
		return nil
	}
	for n := 0; ; n++ {
		p := path
		if elem != nil {
			p = fmt.Sprintf("%s[%d]", path, n)
		}
		if err := sc.value(elem, p, depth+1); err != nil {
			return err
		}
		if done, err := sc.after(']'); done || err != nil {
			return err
		}
	}
}

func (sc *keyScanner) object(s *shape, path string, depth int) error {
	sc.i++
	var seen map[string]string // folded (or, in a map, exact) key -> the key as sent
	sc.ws()
	if sc.i < len(sc.b) && sc.b[sc.i] == '}' {
		sc.i++
		return nil
	}
	for {
		sc.ws()
		if sc.i >= len(sc.b) || sc.b[sc.i] != '"' {
			return errSyntax
		}
		raw, err := sc.str()
		if err != nil {
			return err
		}
		sc.ws()
		if sc.i >= len(sc.b) || sc.b[sc.i] != ':' {
			return errSyntax
		}
		sc.i++
		var sub *shape
		var subPath string
		if s != nil {
			if seen == nil {
				seen = map[string]string{}
			}
			key, err := unquote(raw)
			if err != nil {
				return err
			}
			if sub, subPath, err = s.member(seen, key, path); err != nil {
				return err
			}
		}
		if err := sc.value(sub, subPath, depth+1); err != nil {
			return err
		}
		if done, err := sc.after('}'); done || err != nil {
			return err
		}
	}
}

// after consumes what follows a member of an array or object: a comma (more members follow) or
// closer (done). Anything else, or the end of the input, is a syntax error.
func (sc *keyScanner) after(closer byte) (done bool, err error) {
	sc.ws()
	if sc.i >= len(sc.b) {
		return false, errSyntax
	}
	switch sc.b[sc.i] {
	case ',':
		sc.i++
		return false, nil
	case closer:
		sc.i++
		return true, nil
	default:
		return false, errSyntax
	}
}

// member checks key of an object of shape s (at path) against the keys seen before it and
// returns the shape and path of its value.
func (s *shape) member(seen map[string]string, key, path string) (*shape, string, error) {
	if s.Map {
		if _, dup := seen[key]; dup {
			return nil, "", BadRequest(join(path, key), "field %q is sent twice in %q", key, path)
		}
		seen[key] = key
		return nil, "", nil
	}
	f := foldKey(key)
	name, known := folded[s][f]
	if !known {
		return nil, "", nil
	}
	p := join(path, name)
	if key != name {
		return nil, "", BadRequest(p, "field %q is spelled %q: send each field once, spelled exactly", name, key)
	}
	if _, dup := seen[f]; dup {
		return nil, "", BadRequest(p, "field %q is sent twice", name)
	}
	seen[f] = key
	return s.fields[name], p, nil
}

// unquote decodes a raw JSON string (quotes included) as encoding/json does.
func unquote(raw []byte) (string, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var k string
	if err := json.Unmarshal(raw, &k); err != nil {
		return "", errSyntax
	}
	return k, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// foldKey is key with every rune replaced by the smallest rune of its Unicode case-folding
// orbit: foldKey(a) == foldKey(b) exactly when encoding/json matches a and b as the same field
// name (bytes.EqualFold).
func foldKey(key string) string {
	b := make([]byte, 0, len(key))
	for _, r := range key {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b = utf8.AppendRune(b, min)
	}
	return string(b)
}
