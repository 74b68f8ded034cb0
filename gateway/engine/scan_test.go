package engine

import (
	"bytes"
	"testing"
)

// refScan is the relay's former detection, several bytes.Index scans per chunk: scanChunk must
// give the same answers.
func refScan(data []byte) chunkScan {
	s := chunkScan{decode: bytes.Contains(data, []byte(`"usage":`)) || bytes.Contains(data, []byte(`"error":`))}
	for _, k := range []string{`"content":"`, `"text":"`, `"reasoning_content":"`, `"reasoning":"`} {
		if i := bytes.Index(data, []byte(k)); i >= 0 && i+len(k) < len(data) && data[i+len(k)] != '"' {
			s.token = true
			return s
		}
	}
	k := []byte(`"tool_calls":[`)
	if i := bytes.Index(data, k); i >= 0 && i+len(k) < len(data) && data[i+len(k)] != ']' {
		s.token = true
	}
	return s
}

var scanCases = []string{
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok1 "},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`,
	`{"choices":[{"delta":{"content":""}},{"delta":{"content":"x"}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
	`{"choices":[{"delta":{"content":"a"}}],"usage":null}`,
	`{"error":{"message":"boom"}}`,
	`{"choices":[{"delta":{"reasoning":"hm","reasoning_content":""}}]}`,
	`{"choices":[{"delta":{"reasoning_content":"","reasoning":"hm"}}]}`,
	`{"choices":[{"delta":{"tool_calls":[]}}],"x":"tool_calls"}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`,
	`{"choices":[{"delta":{"content":"\"usage\":\"error\":"}}]}`,
	`{"choices":[{"text":"`,
	`"content":"`,
	`"`,
	``,
	`""""`,
	`{"usage":`,
}

func TestScanChunkMatchesReference(t *testing.T) {
	for _, c := range scanCases {
		if got, want := scanChunk([]byte(c)), refScan([]byte(c)); got != want {
			t.Errorf("scanChunk(%s) = %+v, want %+v", c, got, want)
		}
	}
}

func FuzzScanChunk(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := scanChunk(data), refScan(data); got != want {
			t.Errorf("scanChunk(%q) = %+v, want %+v", data, got, want)
		}
	})
}

// BenchmarkScanChunk compares one pass over a typical token chunk with the former scans.
func BenchmarkScanChunk(b *testing.B) {
	data := []byte(scanCases[0])
	b.Run("one-pass", func(b *testing.B) {
		for b.Loop() {
			scanChunk(data)
		}
	})
	b.Run("bytes.Index", func(b *testing.B) {
		for b.Loop() {
			refScan(data)
		}
	})
}
