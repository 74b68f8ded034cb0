package store

import (
	"errors"
	"fmt"
	"io"
)

// Chunking parameters. Chunk boundaries depend only on content (FastCDC with
// a gear hash and normalized chunking), so an unchanged region of a file
// yields the same chunks in every checkpoint and is stored once.
const (
	MinChunk = 256 << 10
	AvgChunk = 1 << 20
	MaxChunk = 4 << 20
)

// Masks for normalized chunking (FastCDC level 2): before the average size
// a cut needs log2(AvgChunk)+2 = 22 zero bits (maskS), after it 20-2 = 18
// (maskL), which narrows the size spread around AvgChunk. The bits are every
// other bit from the top down, so a cut depends on the gear hash of the
// last 43 bytes or more (bit j of the hash mixes the last j+1 bytes);
// maskL's bits are a subset of maskS's. Changing the masks moves chunk
// boundaries, which only costs deduplication against chunks stored before
// (the store is content-addressed: every stored chunk stays readable).
const (
	maskS uint64 = 0xaaaaaaaaaaa00000 // 22 bits: 21, 23, ..., 63
	maskL uint64 = 0xaaaaaaaaa0000000 // 18 bits: 29, 31, ..., 63
)

// gear is the gear hash table, derived from a fixed seed with splitmix64 so
// chunk boundaries never change between builds.
var gear = func() (g [256]uint64) {
	x := uint64(0x6e65757230)
	for i := range g {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		g[i] = z ^ (z >> 31)
	}
	return g
}()

// Chunker splits a stream into content-defined chunks.
type Chunker struct {
	r   io.Reader
	buf []byte
	// buf[start:end] holds read but not yet returned bytes.
	start, end int
	eof        bool
}

// NewChunker returns a chunker reading r.
func NewChunker(r io.Reader) *Chunker {
	return &Chunker{r: r, buf: make([]byte, 2*MaxChunk)}
}

// Next returns the next chunk. The slice is valid until the next call. It
// returns io.EOF after the last chunk.
func (c *Chunker) Next() ([]byte, error) {
	if err := c.fill(); err != nil {
		return nil, err
	}
	n := c.end - c.start
	if n == 0 {
		return nil, io.EOF
	}
	cut := cutPoint(c.buf[c.start:c.end])
	chunk := c.buf[c.start : c.start+cut]
	c.start += cut
	return chunk, nil
}

// fill makes sure at least MaxChunk bytes are buffered unless at EOF.
func (c *Chunker) fill() error {
	if c.end-c.start >= MaxChunk || c.eof {
		return nil
	}
	copy(c.buf, c.buf[c.start:c.end])
	c.end -= c.start
	c.start = 0
	for c.end < len(c.buf) && !c.eof {
		n, err := c.r.Read(c.buf[c.end:])
		c.end += n
		if errors.Is(err, io.EOF) {
			c.eof = true
		} else if err != nil {
			return fmt.Errorf("chunker read: %w", err)
		}
	}
	return nil
}

// cutPoint returns the length of the first chunk of b (FastCDC).
func cutPoint(b []byte) int {
	n := len(b)
	if n <= MinChunk {
		return n
	}
	if n > MaxChunk {
		n = MaxChunk
	}
	normal := min(AvgChunk, n)
	var h uint64
	i := MinChunk
	for ; i < normal; i++ {
		h = (h << 1) + gear[b[i]]
		if h&maskS == 0 {
			return i
		}
	}
	for ; i < n; i++ {
		h = (h << 1) + gear[b[i]]
		if h&maskL == 0 {
			return i
		}
	}
	return n
}
