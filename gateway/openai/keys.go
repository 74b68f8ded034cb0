package openai

import (
	"bytes"
	"encoding/json"
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
	messageShape = &shape{fields: map[string]*shape{"role": nil, "content": {elem: partShape}}}
	// bodyShape is the request body as the wire struct and Message.Text read it.
	bodyShape = &shape{fields: map[string]*shape{
		"model": nil, "stream": nil, "max_tokens": nil, "max_completion_tokens": nil,
		"stream_options": {fields: map[string]*shape{"include_usage": nil}},
		"messages":       {elem: messageShape},
		"prompt":         nil, "user": nil, "conversation_id": nil,
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
// decoder's error.
func checkKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := walk(dec, bodyShape, "")
	if _, ok := err.(*Error); ok {
		return err
	}
	return nil
}

// walk reads one value from dec, checking the keys of the objects shape s describes (nil: the
// value is skipped).
func walk(dec *json.Decoder, s *shape, path string) error {
	if s == nil {
		var skip json.RawMessage
		return dec.Decode(&skip)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walk(dec, s.elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case '{':
		if err := walkObject(dec, s, path); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// walkObject reads the members of an object whose '{' was read; s is not nil.
func walkObject(dec *json.Decoder, s *shape, path string) error {
	seen := map[string]string{} // folded (or, in a map, exact) key -> the key as sent
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var sub *shape
		switch {
		case s.Map:
			if _, dup := seen[key]; dup {
				return BadRequest(join(path, key), "field %q is sent twice in %q", key, path)
			}
			seen[key] = key
		default:
			f := foldKey(key)
			if name, known := folded[s][f]; known {
				p := join(path, name)
				if key != name {
					return BadRequest(p, "field %q is spelled %q: send each field once, spelled exactly", name, key)
				}
				if _, dup := seen[f]; dup {
					return BadRequest(p, "field %q is sent twice", name)
				}
				seen[f] = key
				sub = s.fields[name]
			}
		}
		if err := walk(dec, sub, join(path, key)); err != nil {
			return err
		}
	}
	return nil
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
