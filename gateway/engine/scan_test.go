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
	`{"choices":[{"delta":{"content":null,"reasoning_content":"x"}}],"content":"y"}`,
	`{"choices":[{"delta":{"reasoning_content":"x"}}]}`,
	`{"choices":[{"delta":{"x_content":"y","text_":"z","\"content":"q"}}]}`,
	`{"a":"\"usage\":1","tool_calls":[]}`,
}

func TestScanChunkMatchesReference(t *testing.T) {
	for _, c := range scanCases {
		if got, want := scanChunk([]byte(c)), refScan([]byte(c)); got != want {
			t.Errorf("scanChunk(%s) = %+v, want %+v", c, got, want)
		}
	}
}

// TestScanChunkAlignments shifts every case by 0-16 bytes and cuts it at every length, so each
// key end falls at every position of scanChunk's eight-byte words and in its byte-wise tail.
func TestScanChunkAlignments(t *testing.T) {
	for _, c := range scanCases {
		for pad := 0; pad <= 16; pad++ {
			full := append(bytes.Repeat([]byte(" "), pad), c...)
			for n := 0; n <= len(full); n++ {
				if got, want := scanChunk(full[:n]), refScan(full[:n]); got != want {
					t.Fatalf("scanChunk(%q) = %+v, want %+v", full[:n], got, want)
				}
			}
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
