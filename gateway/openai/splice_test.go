package openai

import (
	"encoding/json"
	"testing"
)

// FuzzSpliceObject: on any JSON object, setting, replacing or removing a member gives valid JSON
// with that member set (or gone) and every other member unchanged.
func FuzzSpliceObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{ "x" : [1, {"x":2}] , "b":"\u00e9" }`, `{"x":null,"x":2}`, `{"a":{"b":[]},"c":1.0e2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var before map[string]json.RawMessage
		if json.Unmarshal([]byte(doc), &before) != nil || before == nil {
			return
		}
		for _, v := range []json.RawMessage{json.RawMessage(`"v"`), nil} {
			out, err := spliceObject([]byte(doc), map[string]json.RawMessage{"x": v})
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			var after map[string]json.RawMessage
			if err := json.Unmarshal(out, &after); err != nil {
				t.Fatalf("%s -> invalid %s: %v", doc, out, err)
			}
			if got, ok := after["x"]; (v == nil) == ok || v != nil && string(got) != `"v"` {
				t.Fatalf("%s -> %s: x = %s", doc, out, got)
			}
			for k, val := range before {
				if k != "x" && string(after[k]) != string(val) {
					t.Fatalf("%s -> %s: %s changed", doc, out, k)
				}
			}
		}
	})
}
