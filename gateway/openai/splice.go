package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// The gateway edits JSON in place: a changed value is written over the bytes of the old one and
// every other byte of the document (other members, their order, spacing, number spellings such
// as 1.0e2, \u escapes) is kept as sent. Only the values the gateway owns change.

// span is one member of an object (key, start of the key's quote, start and end of its value)
// or one element of an array (key empty, start == valStart).
type span struct {
	key             string
	start, val, end int
}

// spans lists the members of the object or the elements of the array in doc, with their byte
// offsets, and the offset just past the opening bracket. It walks doc with the key scanner
// (strings are skipped with bytes.IndexByte), not a decoder.
func spans(doc []byte) ([]span, int, error) {
	sc := &keyScanner{b: doc}
	sc.ws()
	if sc.i >= len(doc) || (doc[sc.i] != '{' && doc[sc.i] != '[') {
		return nil, 0, fmt.Errorf("not a JSON object or array")
	}
	object := doc[sc.i] == '{'
	closer := byte(']')
	if object {
		closer = '}'
	}
	sc.i++
	open := sc.i
	sc.ws()
	if sc.i < len(doc) && doc[sc.i] == closer {
		return nil, open, nil
	}
	var out []span
	for {
		sc.ws()
		s := span{start: sc.i}
		if object {
			if sc.i >= len(doc) || doc[sc.i] != '"' {
				return nil, 0, errSyntax
			}
			raw, err := sc.str()
			if err != nil {
				return nil, 0, err
			}
			if s.key, err = unquote(raw); err != nil {
				return nil, 0, err
			}
			sc.ws()
			if sc.i >= len(doc) || doc[sc.i] != ':' {
				return nil, 0, errSyntax
			}
			sc.i++
			sc.ws()
		}
		s.val = sc.i
		if err := sc.value(nil, "", 0); err != nil {
			return nil, 0, err
		}
		s.end = sc.i
		out = append(out, s)
		done, err := sc.after(closer)
		if err != nil {
			return nil, 0, err
		}
		if done {
			return out, open, nil
		}
	}
}

// spliceObject returns obj with the members named in edits replaced by their values (every
// member of that name, when a key repeats), removed where the value is nil, and added at the end
// when absent. The rest of obj is kept byte for byte.
func spliceObject(obj []byte, edits map[string]json.RawMessage) ([]byte, error) {
	ms, open, err := spans(obj)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(obj)+64)
	out = append(out, obj[:open]...)
	lastKept, kept, pos := len(out), false, open
	present := map[string]bool{}
	for i, m := range ms {
		present[m.key] = true
		v, edited := edits[m.key]
		if edited && v == nil {
			if i == len(ms)-1 {
				out = out[:lastKept] // the separator before it goes with it
				pos = m.end
				continue
			}
			out = append(out, obj[pos:m.start]...)
			pos = ms[i+1].start
			continue
		}
		out = append(out, obj[pos:m.val]...)
		if edited {
			out = append(out, v...)
		} else {
			out = append(out, obj[m.val:m.end]...)
		}
		lastKept, kept, pos = len(out), true, m.end
	}
	var added []string
	for k, v := range edits {
		if v != nil && !present[k] {
			added = append(added, k)
		}
	}
	sort.Strings(added)
	for _, k := range added {
		if kept {
			out = append(out, ',')
		}
		kb, _ := json.Marshal(k)
		out = append(append(append(out, kb...), ':'), edits[k]...)
		kept = true
	}
	return append(out, obj[pos:]...), nil
}

// spliceArray returns arr with the elements at the indexes of edits replaced, the rest kept
// byte for byte. Indexes past the end are an error.
func spliceArray(arr []byte, edits map[int]json.RawMessage) ([]byte, error) {
	es, _, err := spans(arr)
	if err != nil {
		return nil, err
	}
	idx := make([]int, 0, len(edits))
	for i := range edits {
		if i < 0 || i >= len(es) {
			return nil, fmt.Errorf("element %d out of range [0,%d)", i, len(es))
		}
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]byte, 0, len(arr)+64)
	pos := 0
	for _, i := range idx {
		out = append(append(out, arr[pos:es[i].val]...), edits[i]...)
		pos = es[i].end
	}
	return append(out, arr[pos:]...), nil
}

// rawElements splits a JSON array into its elements as sent.
func rawElements(arr []byte) ([]json.RawMessage, error) {
	es, _, err := spans(arr)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, len(es))
	for i, e := range es {
		out[i] = arr[e.val:e.end]
	}
	return out, nil
}

// memberValue returns the value of key in obj as sent (the last one when it repeats), or nil.
func memberValue(obj []byte, key string) json.RawMessage {
	ms, _, err := spans(obj)
	if err != nil {
		return nil
	}
	var v json.RawMessage
	for _, m := range ms {
		if m.key == key {
			v = obj[m.val:m.end]
		}
	}
	return v
}

// setString sets key in obj to the string s.
func setString(obj []byte, key, s string) ([]byte, error) {
	return spliceObject(obj, map[string]json.RawMessage{key: quote(s)})
}

// quote is the JSON string of s; unlike json.Marshal it leaves <, > and & as they are, so a
// placeholder such as <EMAIL_ADDRESS> reads as itself.
func quote(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
