package store

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func chunkAll(t *testing.T, data []byte) [][]byte {
	t.Helper()
	c := NewChunker(bytes.NewReader(data))
	var out [][]byte
	for {
		b, err := c.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]byte(nil), b...))
	}
}

func randBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

func TestChunkerBoundsAndReassembly(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"tiny", []byte("hello")},
		{"random 20MiB", randBytes(20<<20, 1)},
		{"zeros 10MiB", make([]byte, 10<<20)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chunks := chunkAll(t, tc.data)
			if got := bytes.Join(chunks, nil); !bytes.Equal(got, tc.data) {
				t.Fatalf("reassembled %d bytes differ from input %d bytes", len(got), len(tc.data))
			}
			for i, c := range chunks {
				if len(c) > MaxChunk {
					t.Errorf("chunk %d has %d bytes > max %d", i, len(c), MaxChunk)
				}
				if i < len(chunks)-1 && len(c) < MinChunk {
					t.Errorf("chunk %d has %d bytes < min %d", i, len(c), MinChunk)
				}
			}
		})
	}
}

// TestChunkerShiftResistant checks the point of content-defined chunking: an
// insertion near the start changes only the chunks around it.
func TestChunkerShiftResistant(t *testing.T) {
	base := randBytes(32<<20, 2)
	shifted := append(append(append([]byte(nil), base[:1000]...), []byte("inserted bytes")...), base[1000:]...)
	seen := map[string]bool{}
	for _, c := range chunkAll(t, base) {
		seen[string(c)] = true
	}
	var newBytes int
	for _, c := range chunkAll(t, shifted) {
		if !seen[string(c)] {
			newBytes += len(c)
		}
	}
	if newBytes > 2*MaxChunk {
		t.Errorf("an insertion produced %d new bytes, want <= %d", newBytes, 2*MaxChunk)
	}
}
