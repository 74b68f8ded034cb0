package store

import (
	"encoding/json"
	"strings"
	"testing"
)

var validJSONCases = []string{
	``, ` `, `{}`, ` { } `, `[]`, `[ ]`, `{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`,
	`[1,2,3]`, `[1,,2]`, `[1 2]`, `[`, `]`, `{`, `}`, `{"a":[{"b":{"c":[]}}]}`, `{"a":[}`, `[{]}`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.5e10`, `2.`, `1.e3`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `nullnull`, `True`,
	`""`, `"abc"`, `"a\"b"`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u00e9"`, `"\u00G9"`, `"\u00e"`, `"\x"`, `"abc`,
	"\"a\tb\"", "\"a\x01b\"", "\"\xff\xfe\"", "\"é\"", `"\ud800"`, "{\"a\":1}\n", "{\"a\":1}\x00",
	`{"a":1}{}`, `{} {}`, `[1] x`, `{"turns":[{"role":"user","content":"hi"}],"n":-12.5e-3,"ok":true,"x":null}`,
	strings.Repeat("[", maxNestingDepth) + strings.Repeat("]", maxNestingDepth),
	strings.Repeat("[", maxNestingDepth+1) + strings.Repeat("]", maxNestingDepth+1),
	strings.Repeat(`{"a":`, maxNestingDepth) + "1" + strings.Repeat("}", maxNestingDepth),
	strings.Repeat(`{"a":`, maxNestingDepth+1) + "1" + strings.Repeat("}", maxNestingDepth+1),
}

// TestValidJSONAgreesWithEncodingJSON checks validJSON and IsObject against
// encoding/json on edge cases, including the nesting limit.
func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range validJSONCases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.40q) = %v, json.Valid = %v", c, got, want)
		}
		var m map[string]any
		if got, want := IsObject([]byte(c)), json.Unmarshal([]byte(c), &m) == nil && m != nil; got != want {
			t.Errorf("IsObject(%.40q) = %v, json.Unmarshal into a map = %v", c, got, want)
		}
	}
	if doc := benchDoc(16 << 10); !validJSON(doc) || !IsObject(doc) {
		t.Errorf("benchDoc not valid")
	}
}

// FuzzValidJSON: go test ./sidecar/store -run '^$' -fuzz FuzzValidJSON -fuzztime 30s
func FuzzValidJSON(f *testing.F) {
	for _, c := range validJSONCases {
		if len(c) < 1000 {
			f.Add([]byte(c))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

// BenchmarkIsObject compares the validator with json.Valid on a 16 KiB chat session.
func BenchmarkIsObject(b *testing.B) {
	doc := benchDoc(16 << 10)
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if !IsObject(doc) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if !json.Valid(doc) {
				b.Fatal("invalid")
			}
		}
	})
}

// TestValidJSONSpecialAtEveryLane puts each byte that matters inside a
// string (controls, the quote, the backslash, and their neighbours) at every
// offset of the eight-byte scan and after it, and checks the verdict against
// encoding/json.
func TestValidJSONSpecialAtEveryLane(t *testing.T) {
	for _, c := range []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"', 0x23, '\\', 0x5b, 0x5d, 0x7f, 0x80, 0xc3, 0xff} {
		for pos := range 20 {
			s := []byte(`{"k":"` + strings.Repeat("a", 19) + `"}`)
			s[6+pos] = c
			if got, want := validJSON(s), json.Valid(s); got != want {
				t.Errorf("byte %#x at %d: validJSON(%q) = %v, json.Valid = %v", c, pos, s, got, want)
			}
		}
	}
}
