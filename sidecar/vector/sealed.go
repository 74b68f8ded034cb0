package vector

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/neuronetes/neuronetes/sidecar/frame"
)

// Sealed shard file format (little-endian), version 1:
//
//	"NNVS" u32 version=1, 16-byte random save id, then records of u32 length
//	and a frame (sidecar/frame: compressed, AES-256-GCM under the tenant's
//	key), then a CRC-32C of all preceding bytes.
//
// The frames hold the shard body (persist.go) cut into chunks of at most
// sealChunk bytes, in order. Frame i is bound to kind "vec" and id
// "<save id>/<i>", the last one to "<save id>/<i>/last", so chunks cannot be
// reordered, dropped, cut short or mixed between saves without failing
// authentication. The CRC only tells a torn write from tampering early.
const (
	sealedMagic   = "NNVS"
	sealedVersion = 1
	// sealChunk bounds one frame's plaintext (frame.Codec limits a frame to
	// the session size limit plus 64 KiB; the smallest limit is above this).
	sealChunk = 64 << 10
	saveIDLen = 16
)

// Sealer seals and opens frames with the tenant's key; *frame.Codec is one.
type Sealer interface {
	Seal(b frame.Binding, plaintext []byte) ([]byte, error)
	Open(b frame.Binding, f []byte) ([]byte, error)
}

func chunkBinding(saveID []byte, i int, last bool) frame.Binding {
	id := fmt.Sprintf("%s/%d", hex.EncodeToString(saveID), i)
	if last {
		id += "/last"
	}
	return frame.Binding{Kind: "vec", ID: id}
}

// sealWriter cuts what is written into chunks and writes each sealed as one
// record; Close writes the last one.
type sealWriter struct {
	w      io.Writer
	s      Sealer
	saveID []byte
	n      int
	buf    []byte
}

func (sw *sealWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		take := min(len(p), sealChunk-len(sw.buf))
		sw.buf = append(sw.buf, p[:take]...)
		p = p[take:]
		// A full chunk is only written once more data follows, so the last
		// chunk is always the one Close writes.
		if len(sw.buf) == sealChunk && len(p) > 0 {
			if err := sw.emit(false); err != nil {
				return 0, err
			}
		}
	}
	return total, nil
}

func (sw *sealWriter) emit(last bool) error {
	f, err := sw.s.Seal(chunkBinding(sw.saveID, sw.n, last), sw.buf)
	if err != nil {
		return fmt.Errorf("seal chunk %d: %w", sw.n, err)
	}
	if _, err := sw.w.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(f)))); err != nil {
		return err
	}
	if _, err := sw.w.Write(f); err != nil {
		return err
	}
	sw.n++
	sw.buf = sw.buf[:0]
	return nil
}

func (sw *sealWriter) Close() error { return sw.emit(true) }

// Save writes the index to path sealed with s, atomically (temp file,
// fsync, rename). Nothing is written when s cannot seal (no key yet).
func (x *Index) Save(path string, s Sealer) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".vectors-*")
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := crc32.New(crcTable)
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, h), 1<<20)
	saveID := make([]byte, saveIDLen)
	if _, err := rand.Read(saveID); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	hdr := binary.LittleEndian.AppendUint32([]byte(sealedMagic), sealedVersion)
	if _, err := bw.Write(append(hdr, saveID...)); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	sw := &sealWriter{w: bw, s: s, saveID: saveID, buf: make([]byte, 0, sealChunk)}
	if err := x.writeBody(sw); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if err := sw.Close(); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if _, err := tmp.Write(binary.LittleEndian.AppendUint32(nil, h.Sum32())); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	return nil
}

// Load reads an index saved by Save, opening it with s, into a new index
// with options o (o.Dim is taken from the file). plaintext is true when the
// file is an unsealed shard of an earlier release: it is read as it is, and
// the caller should Save at once so that the plaintext is replaced. A file
// that fails its checks, or that s cannot open (another tenant's or a
// removed key), is ErrCorrupt; a missing file is returned as is
// (os.ErrNotExist).
func Load(path string, o Options, s Sealer) (x *Index, plaintext bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	if len(b) >= 4 && string(b[:4]) == fileMagic {
		x, err := parseBody(path, b, o)
		return x, true, err
	}
	body, err := openSealed(path, b, s)
	if err != nil {
		return nil, false, err
	}
	x, err = parseBody(path, body, o)
	return x, false, err
}

// openSealed checks a sealed shard file and returns its body.
func openSealed(path string, b []byte, s Sealer) ([]byte, error) {
	le := binary.LittleEndian
	const hdr = len(sealedMagic) + 4 + saveIDLen
	if len(b) < hdr+4 || string(b[:4]) != sealedMagic {
		return nil, fmt.Errorf("%s: header: %w", path, ErrCorrupt)
	}
	if crc32.Checksum(b[:len(b)-4], crcTable) != le.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%s: checksum: %w", path, ErrCorrupt)
	}
	if v := le.Uint32(b[4:8]); v != sealedVersion {
		return nil, fmt.Errorf("%s: sealed version %d: %w", path, v, ErrCorrupt)
	}
	saveID, rest := b[8:hdr], b[hdr:len(b)-4]
	var body []byte
	for i := 0; ; i++ {
		if len(rest) < 4 || int(le.Uint32(rest)) > len(rest)-4 {
			return nil, fmt.Errorf("%s: record %d: %w", path, i, ErrCorrupt)
		}
		n := int(le.Uint32(rest))
		f := rest[4 : 4+n]
		rest = rest[4+n:]
		last := len(rest) == 0
		p, err := s.Open(chunkBinding(saveID, i, last), f)
		if err != nil {
			return nil, fmt.Errorf("%s: chunk %d: %w", path, i, errors.Join(ErrCorrupt, err))
		}
		body = append(body, p...)
		if last {
			return body, nil
		}
	}
}
