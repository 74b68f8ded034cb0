package vector

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Shard body format (little-endian): "NNVX" u32 version=1, u32 dim, u32
// nlist, u64 trainedAt, nlist*dim f32 centroids (nlist = 0 when untrained),
// u64 count, then count entries from least to most recently used: u32 list,
// u16 idLen, id, u32 metaLen, meta, dim f32; then a CRC-32C of all
// preceding bytes. Saving in LRU order lets Load restore the eviction
// order. On disk the body is sealed (sealed.go); a bare body is the file
// format of earlier releases, which Load still reads.
const fileMagic = "NNVX"

// bodyVersion is the version of the shard body.
const bodyVersion = 1

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt means a persisted index failed its checksum, structure or
// authentication checks.
var ErrCorrupt = errors.New("corrupt index file")

// writeBody writes the index as a shard body (with its checksum) to w.
func (x *Index) writeBody(w io.Writer) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	h := crc32.New(crcTable)
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
	le := binary.LittleEndian
	var buf []byte
	buf = append(buf, fileMagic...)
	buf = le.AppendUint32(buf, bodyVersion)
	buf = le.AppendUint32(buf, uint32(x.dim))
	nlist := 0
	if x.centroids != nil {
		nlist = len(x.lists)
	}
	buf = le.AppendUint32(buf, uint32(nlist))
	buf = le.AppendUint64(buf, uint64(x.trainedAt))
	if nlist > 0 {
		for _, f := range x.centroids {
			buf = le.AppendUint32(buf, math.Float32bits(f))
		}
	}
	buf = le.AppendUint64(buf, uint64(len(x.locs)))
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	x.lruMu.Lock()
	order := make([]string, 0, x.lru.Len())
	for el := x.lru.Back(); el != nil; el = el.Prev() {
		order = append(order, el.Value.(string))
	}
	x.lruMu.Unlock()
	for _, id := range order {
		lc := x.locs[id]
		l := x.lists[lc.list]
		p := int(lc.pos)
		buf = buf[:0]
		buf = le.AppendUint32(buf, uint32(lc.list))
		buf = le.AppendUint16(buf, uint16(len(id)))
		buf = append(buf, id...)
		buf = le.AppendUint32(buf, uint32(len(l.meta[p])))
		buf = append(buf, l.meta[p]...)
		for _, f := range l.vecs[p*x.dim : (p+1)*x.dim] {
			buf = le.AppendUint32(buf, math.Float32bits(f))
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(le.AppendUint32(nil, h.Sum32()))
	return err
}

// parseBody reads a shard body into a new index with options o (o.Dim is
// taken from the body); name labels errors.
func parseBody(name string, b []byte, o Options) (*Index, error) {
	if len(b) < 32 || string(b[:4]) != fileMagic {
		return nil, fmt.Errorf("%s: header: %w", name, ErrCorrupt)
	}
	le := binary.LittleEndian
	body, sum := b[:len(b)-4], le.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%s: checksum: %w", name, ErrCorrupt)
	}
	r := &reader{b: body[4:]}
	if v := r.u32(); v != bodyVersion {
		return nil, fmt.Errorf("%s: version %d: %w", name, v, ErrCorrupt)
	}
	o.Dim = int(r.u32())
	x := New(o)
	nlist := int(r.u32())
	x.trainedAt = int(r.u64())
	if nlist > 0 {
		x.centroids = r.f32s(nlist * x.dim)
		x.lists = make([]*ivfList, nlist)
		x.cnorms, x.cn2 = make([]float32, nlist), make([]float32, nlist)
		for c := range nlist {
			x.lists[c] = &ivfList{}
			cv := x.centroids[c*x.dim : (c+1)*x.dim]
			x.cn2[c] = dot(cv, cv)
			x.cnorms[c] = float32(math.Sqrt(float64(x.cn2[c])))
		}
	}
	count := r.u64()
	for i := uint64(0); i < count && r.err == nil; i++ {
		li := int(r.u32())
		id := string(r.bytes(int(r.u16())))
		meta := r.bytes(int(r.u32()))
		vec := r.f32s(x.dim)
		if r.err != nil || li >= len(x.lists) || id == "" {
			return nil, fmt.Errorf("%s: entry %d: %w", name, i, ErrCorrupt)
		}
		l := x.lists[li]
		l.ids = append(l.ids, id)
		l.vecs = append(l.vecs, vec...)
		l.norms = append(l.norms, norm(vec))
		l.meta = append(l.meta, meta)
		x.locs[id] = loc{int32(li), int32(len(l.ids) - 1)}
		x.bytes += x.entrySize(id, meta)
		x.touch(id)
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("%s: trailing or short data: %w", name, ErrCorrupt)
	}
	return x, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = ErrCorrupt
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u16() uint16 {
	if b := r.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) bytes(n int) []byte { return append([]byte(nil), r.take(n)...) }

func (r *reader) f32s(n int) []float32 {
	b := r.take(4 * n)
	if b == nil {
		return nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
