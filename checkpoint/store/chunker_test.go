package store

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
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

// expectedMean is the mean chunk size of random data under cutPoint: no cut
// before MinChunk, a cut with probability 2^-22 per byte up to AvgChunk and
// 2^-18 after it (FastCDC's normalized chunking puts the mean a little above
// AvgChunk, since the first MinChunk bytes are never cut).
func expectedMean() float64 {
	pS, pL := 1/float64(uint64(1)<<bits.OnesCount64(maskS)), 1/float64(uint64(1)<<bits.OnesCount64(maskL))
	mean, alive := float64(MinChunk), 1.0
	for i := MinChunk; i < MaxChunk; i++ {
		p := pS
		if i >= AvgChunk {
			p = pL
		}
		alive *= 1 - p
		mean += alive // P(size > i+1)
	}
	return mean
}

// TestChunkerAverageSize checks the masks (log2 AvgChunk ± 2 bits) and that
// chunks of incompressible data average what they imply: about 1.14 MiB for
// AvgChunk = 1 MiB, within 10% over 160 MiB (about 140 chunks; the spread
// of one chunk's size is about a third of its mean, so the mean's is 3%).
func TestChunkerAverageSize(t *testing.T) {
	if n := bits.OnesCount64(maskS); n != 22 {
		t.Errorf("maskS has %d bits, want 22 (log2 AvgChunk + 2)", n)
	}
	if n := bits.OnesCount64(maskL); n != 18 {
		t.Errorf("maskL has %d bits, want 18 (log2 AvgChunk - 2)", n)
	}
	want := expectedMean()
	if want < AvgChunk || want > 1.2*AvgChunk {
		t.Fatalf("the masks imply a mean chunk of %.0f KiB, want about %d KiB", want/1024, AvgChunk>>10)
	}
	const total = 160 << 20
	c := NewChunker(bytes.NewReader(randBytes(total, 3)))
	n, sum := 0, 0
	for {
		b, err := c.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		sum += len(b)
	}
	avg := float64(sum) / float64(n)
	t.Logf("%d chunks, average %.0f KiB (expected %.0f KiB)", n, avg/1024, want/1024)
	if avg < 0.9*want || avg > 1.1*want {
		t.Fatalf("average chunk %.0f KiB over %d chunks, want %.0f KiB ± 10%%", avg/1024, n, want/1024)
	}
}
