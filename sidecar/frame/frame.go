// Package frame seals sidecar values at rest: compression (S2 by default,
// or zstd) followed by AES-256-GCM, in a self-describing frame that names
// the key id and the codec, so readers open every kind whatever they write.
//
// Frame layout (all integers big-endian):
//
//	offset 0  magic   "NF"
//	       2  version 0x02 (0x01: earlier releases, see below)
//	       3  flags   bit0: zstd-compressed, bit2: S2-compressed (at most one of
//	                  the two), bit1: compressed with the built-in dictionary
//	       4  L       length of the key id (1..64)
//	       5  key id  L bytes
//	     5+L  nonce   12 random bytes
//	    17+L  AES-256-GCM ciphertext of the (compressed) payload, with 16-byte tag
//
// The additional authenticated data is the whole header (bytes 0..17+L) plus
// the tenant, the value kind and the value id, each length-prefixed, and the
// value's version (a uvarint). A frame therefore only opens for the tenant,
// kind, id and version it was sealed for: an older frame of a session written
// back under the current version fails authentication, and any change to the
// header (format version, key id, flags) does too. Format 1 frames, sealed by
// earlier releases, bind no version; they open only with
// Options.AcceptUnversioned (else ErrUnversioned). A tag failure or an unknown
// key id is always an error, never an empty value.
package frame

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/neuronetes/neuronetes/sidecar/keys"
)

const (
	magic0, magic1 = 'N', 'F'
	// Version is the frame format this package writes: its AAD binds the
	// value's version.
	Version = 2
	// VersionUnbound is the format of earlier releases, whose AAD binds no
	// value version; Open reads it only with Options.AcceptUnversioned.
	VersionUnbound = 1
	flagZstd       = 1 << 0
	flagDict       = 1 << 1
	flagS2         = 1 << 2
	nonceSize      = 12
	tagSize        = 16
	fixedHdr       = 5
	dictID         = 0x4e4e0001
	// DictBelow is the payload size from which the dictionary is not used
	// even with UseDict: it shrinks small sessions (-24% at 256 bytes) but
	// saves 0-5% from 4 KiB up, while decoding with it is slower (S2: 2x at
	// 16 KiB, zstd: 1.5x).
	DictBelow = 4096
)

// Errors returned by Open. They are wrapped; test with errors.Is.
var (
	// ErrMalformed means the bytes are not a frame this package can parse.
	ErrMalformed = errors.New("malformed frame")
	// ErrAuth means the GCM tag did not verify: wrong key, tenant, id or tampering.
	ErrAuth = errors.New("frame authentication failed")
	// ErrTooLarge means the decompressed payload exceeds the codec's limit.
	ErrTooLarge = errors.New("frame payload too large")
	// ErrUnversioned means a format 1 frame (no version bound) was refused.
	ErrUnversioned = errors.New("frame of format 1 binds no version and is not accepted")
)

// Compression names the codec Seal uses. Open reads every codec.
type Compression string

const (
	// CompressS2 is S2 (klauspost/compress/s2, a Snappy successor), the
	// default: about 2x faster than zstd's fastest level to seal chat JSON
	// (the bulk of a PUT's own work), for a frame about 30% larger at 16 KiB.
	CompressS2 Compression = "s2"
	// CompressZstd is zstd at its fastest level, one reused encoder: the
	// smallest frames.
	CompressZstd Compression = "zstd"
	// CompressNone stores the plaintext encrypted but uncompressed.
	CompressNone Compression = "none"
)

// ParseCompression validates a codec name ("" means CompressS2).
func ParseCompression(s string) (Compression, error) {
	switch c := Compression(s); c {
	case "":
		return CompressS2, nil
	case CompressS2, CompressZstd, CompressNone:
		return c, nil
	}
	return "", fmt.Errorf("compression %q: want s2, zstd or none", s)
}

// Binding names what a frame belongs to; it is authenticated but not stored.
type Binding struct {
	// Kind separates value families ("sess", "emb") so one cannot be replayed as another.
	Kind string
	// ID is the value's id within the tenant, e.g. the conversation id.
	ID string
	// Version is the value's version (a session's version; 0 for kinds
	// without versions), so an older frame of the same value cannot be
	// served as the current one.
	Version int64
}

// Options tune a Codec.
type Options struct {
	// Tenant is bound into every frame (normally the pod's namespace).
	Tenant string
	// MaxPlaintext bounds the decompressed size Open accepts (0: 16 MiB).
	MaxPlaintext int
	// Compression is the codec for new frames ("": CompressS2).
	Compression Compression
	// UseDict compresses payloads under DictBelow bytes with the built-in
	// JSON dictionary. Frames record whether they used it, so readers open
	// both kinds whatever this says.
	UseDict bool
	// MinCompress is the payload size below which compression is skipped (0: 64).
	MinCompress int
	// AcceptUnversioned opens format 1 frames of earlier releases, whose AAD
	// binds no value version (an attacker able to write Redis can replay one
	// under any version). Off, they fail with ErrUnversioned.
	AcceptUnversioned bool
}

// Codec seals and opens frames for one tenant. It is safe for concurrent use.
type Codec struct {
	opts  Options
	ring  atomic.Pointer[keys.Ring]
	aeads sync.Map // key id -> cipher.AEAD; cleared when the ring changes

	enc, encDict *zstd.Encoder
	dec          *zstd.Decoder
	s2Dict       *s2.Dict
	// bufs recycles decryption buffers of compressed payloads (*[]byte).
	bufs sync.Pool
}

// New returns a codec for ring and opts.
func New(ring *keys.Ring, opts Options) (*Codec, error) {
	if ring == nil {
		return nil, fmt.Errorf("ring: must not be nil")
	}
	if opts.MaxPlaintext <= 0 {
		opts.MaxPlaintext = 16 << 20
	}
	if opts.MinCompress <= 0 {
		opts.MinCompress = 64
	}
	var err error
	if opts.Compression, err = ParseCompression(string(opts.Compression)); err != nil {
		return nil, err
	}
	c := &Codec{opts: opts, s2Dict: s2.MakeDict(jsonDict, []byte(`{"conversation_id":"`))}
	if c.s2Dict == nil {
		return nil, fmt.Errorf("s2 dictionary: rejected by s2.MakeDict")
	}
	c.ring.Store(ring)
	// No zstd checksum: the GCM tag already authenticates every byte.
	if c.enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false)); err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	if c.encDict, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false),
		zstd.WithEncoderDictRaw(dictID, jsonDict)); err != nil {
		return nil, fmt.Errorf("zstd dict encoder: %w", err)
	}
	if c.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(uint64(opts.MaxPlaintext)), zstd.WithDecoderDictRaw(dictID, jsonDict)); err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return c, nil
}

// Tenant returns the tenant the codec binds frames to.
func (c *Codec) Tenant() string { return c.opts.Tenant }

// SetRing swaps the key ring (rotation). New writes use the new active key;
// frames sealed with any key still in the ring keep opening.
func (c *Codec) SetRing(r *keys.Ring) {
	c.ring.Store(r)
	c.aeads.Clear()
}

// Ring returns the current key ring.
func (c *Codec) Ring() *keys.Ring { return c.ring.Load() }

func (c *Codec) aead(id string) (cipher.AEAD, error) {
	if a, ok := c.aeads.Load(id); ok {
		return a.(cipher.AEAD), nil
	}
	k, err := c.ring.Load().Derive(id, c.opts.Tenant)
	if err != nil {
		return nil, err
	}
	blk, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("aes key %q: %w", id, err)
	}
	a, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, fmt.Errorf("gcm key %q: %w", id, err)
	}
	c.aeads.Store(id, a)
	return a, nil
}

// aad is the additional authenticated data of a frame with header hdr: the
// header, the tenant, kind and id (length-prefixed) and, from format 2 on,
// the value version.
func (c *Codec) aad(hdr []byte, b Binding) []byte {
	out := make([]byte, 0, len(hdr)+len(c.opts.Tenant)+len(b.Kind)+len(b.ID)+4*binary.MaxVarintLen64)
	out = append(out, hdr...)
	for _, s := range []string{c.opts.Tenant, b.Kind, b.ID} {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	if hdr[2] != VersionUnbound {
		out = binary.AppendUvarint(out, uint64(b.Version))
	}
	return out
}

// Seal compresses and encrypts plaintext with the active key, bound to b
// (tenant, kind, id and version).
// It allocates the frame once: the payload is compressed straight after the
// header and encrypted in place.
func (c *Codec) Seal(b Binding, plaintext []byte) ([]byte, error) {
	if len(plaintext) > c.opts.MaxPlaintext {
		return nil, fmt.Errorf("plaintext %d bytes over %d: %w", len(plaintext), c.opts.MaxPlaintext, ErrTooLarge)
	}
	id := c.ring.Load().Active()
	a, err := c.aead(id)
	if err != nil {
		return nil, err
	}
	hdrLen := fixedHdr + len(id) + nonceSize
	var flags byte
	var out []byte
	switch {
	case len(plaintext) < c.opts.MinCompress || c.opts.Compression == CompressNone:
		out = append(make([]byte, hdrLen, hdrLen+len(plaintext)+tagSize), plaintext...)
	case c.opts.Compression == CompressS2:
		out = make([]byte, hdrLen+s2.MaxEncodedLen(len(plaintext))+tagSize)
		var z []byte
		if flags = flagS2; c.opts.UseDict && len(plaintext) < DictBelow {
			flags |= flagDict
			z = c.s2Dict.Encode(out[hdrLen:], plaintext)
		} else {
			z = s2.Encode(out[hdrLen:], plaintext)
		}
		out = out[:hdrLen+len(z)]
	default:
		enc := c.enc
		if flags = flagZstd; c.opts.UseDict && len(plaintext) < DictBelow {
			enc, flags = c.encDict, flagZstd|flagDict
		}
		out = enc.EncodeAll(plaintext, make([]byte, hdrLen, hdrLen+len(plaintext)/2+64+tagSize))
	}
	out[0], out[1], out[2], out[3], out[4] = magic0, magic1, Version, flags, byte(len(id))
	copy(out[fixedHdr:], id)
	if _, err := rand.Read(out[fixedHdr+len(id) : hdrLen]); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	// out[:hdrLen] as dst makes the ciphertext overwrite the payload exactly
	// in place, which cipher.AEAD allows.
	return a.Seal(out[:hdrLen], out[fixedHdr+len(id):hdrLen], out[hdrLen:], c.aad(out[:hdrLen], b)), nil
}

// KeyID returns the key id named by a frame without opening it.
func KeyID(f []byte) (string, error) {
	if len(f) < fixedHdr || f[0] != magic0 || f[1] != magic1 {
		return "", fmt.Errorf("magic: %w", ErrMalformed)
	}
	if f[2] != Version && f[2] != VersionUnbound {
		return "", fmt.Errorf("version %d: %w", f[2], ErrMalformed)
	}
	l := int(f[4])
	if l == 0 || len(f) < fixedHdr+l+nonceSize+tagSize {
		return "", fmt.Errorf("key id length %d for %d bytes: %w", l, len(f), ErrMalformed)
	}
	id := string(f[fixedHdr : fixedHdr+l])
	if !keys.ValidID(id) {
		return "", fmt.Errorf("key id %q: %w", id, ErrMalformed)
	}
	return id, nil
}

// Open authenticates, decrypts and decompresses a frame sealed for b: a
// frame sealed for another tenant, kind, id or version fails with ErrAuth.
func (c *Codec) Open(b Binding, f []byte) ([]byte, error) {
	id, err := KeyID(f)
	if err != nil {
		return nil, err
	}
	flags := f[3]
	switch flags {
	case 0, flagZstd, flagZstd | flagDict, flagS2, flagS2 | flagDict:
	default:
		return nil, fmt.Errorf("flags %#x: %w", flags, ErrMalformed)
	}
	if f[2] == VersionUnbound && !c.opts.AcceptUnversioned {
		return nil, fmt.Errorf("key %q: %w", id, ErrUnversioned)
	}
	a, err := c.aead(id)
	if err != nil {
		return nil, err
	}
	hdrLen := fixedHdr + len(id) + nonceSize
	nonce, ct, aad := f[fixedHdr+len(id):hdrLen], f[hdrLen:], c.aad(f[:hdrLen], b)
	if flags == 0 {
		payload, err := a.Open(nil, nonce, ct, aad)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, ErrAuth)
		}
		return payload, nil
	}
	// A compressed payload is only an intermediate: decrypt it into a
	// recycled buffer, decompress into a fresh one.
	bp, _ := c.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer c.bufs.Put(bp)
	payload, err := a.Open((*bp)[:0], nonce, ct, aad)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", id, ErrAuth)
	}
	*bp = payload[:0]
	if flags&flagS2 != 0 {
		return c.openS2(payload, flags&flagDict != 0)
	}
	out, err := c.dec.DecodeAll(payload, nil)
	if err != nil {
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, fmt.Errorf("decompress: %w", ErrTooLarge)
		}
		return nil, fmt.Errorf("decompress: %v: %w", err, ErrMalformed)
	}
	if len(out) > c.opts.MaxPlaintext {
		return nil, fmt.Errorf("plaintext %d bytes: %w", len(out), ErrTooLarge)
	}
	return out, nil
}

// openS2 decompresses an authenticated S2 payload. The decoded length is
// read from the block header and checked before any allocation (no bombs).
func (c *Codec) openS2(payload []byte, dict bool) ([]byte, error) {
	n, err := s2.DecodedLen(payload)
	if err != nil {
		return nil, fmt.Errorf("decompress: %v: %w", err, ErrMalformed)
	}
	if n > c.opts.MaxPlaintext {
		return nil, fmt.Errorf("plaintext %d bytes: %w", n, ErrTooLarge)
	}
	dst := make([]byte, n)
	var out []byte
	if dict {
		out, err = c.s2Dict.Decode(dst, payload)
	} else {
		out, err = s2.Decode(dst, payload)
	}
	if err != nil {
		return nil, fmt.Errorf("decompress: %v: %w", err, ErrMalformed)
	}
	return out, nil
}
