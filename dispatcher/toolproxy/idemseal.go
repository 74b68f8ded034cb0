package toolproxy

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// IdemKeySize is the size of the key that seals stored tool answers.
const IdemKeySize = 32

// sealedPrefix marks a stored answer sealed with the idempotency key.
const sealedPrefix = "sealed1:"

// ErrAnswerUnreadable means a stored answer did not authenticate: written
// under another key, by an earlier release in plain text, or forged. It is
// never replayed, and the tool is not called again for its key either.
var ErrAnswerUnreadable = errors.New("stored answer does not authenticate")

// IdemSealer seals tool answers at rest (AES-256-GCM, the Redis key as
// associated data, so an answer cannot be moved to another key) and keys the
// fingerprints of pending calls' arguments (HMAC-SHA256), so a reader of
// Redis learns neither answers nor guessable arguments.
type IdemSealer struct {
	aead cipher.AEAD
	mac  []byte
}

// NewIdemSealer returns a sealer for a 32-byte key.
func NewIdemSealer(key []byte) (*IdemSealer, error) {
	if len(key) != IdemKeySize {
		return nil, fmt.Errorf("idempotency key: %d bytes, want %d", len(key), IdemKeySize)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("neuronetes idempotency aes-gcm"))
	blk, err := aes.NewCipher(mac.Sum(nil))
	if err != nil {
		return nil, fmt.Errorf("idempotency key: %w", err)
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, fmt.Errorf("idempotency key: %w", err)
	}
	mac.Reset()
	mac.Write([]byte("neuronetes idempotency hmac"))
	return &IdemSealer{aead: aead, mac: mac.Sum(nil)}, nil
}

// LoadIdemKey reads a 32-byte key from file (ParseIdemKey).
func LoadIdemKey(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("idempotency key file: %w", err)
	}
	k, err := ParseIdemKey(b)
	if err != nil {
		return nil, fmt.Errorf("idempotency key file %s: %w", file, err)
	}
	return k, nil
}

// ParseIdemKey decodes a 32-byte key: the raw bytes or their base64
// (standard or URL alphabet, padded or not), surrounding whitespace ignored.
func ParseIdemKey(b []byte) ([]byte, error) {
	if len(b) == IdemKeySize {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == IdemKeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("want %d raw bytes or their base64", IdemKeySize)
}

// RandomIdemSealer returns a sealer with a key of its own (one replica: no
// other process can open what it seals).
func RandomIdemSealer() (*IdemSealer, error) {
	k := make([]byte, IdemKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("idempotency key: %w", err)
	}
	return NewIdemSealer(k)
}

// argsTag keys an arguments digest, for the pending marker.
func (s *IdemSealer) argsTag(rkey, args string) string {
	m := hmac.New(sha256.New, s.mac)
	m.Write([]byte(rkey))
	m.Write([]byte{0})
	m.Write([]byte(args))
	return hex.EncodeToString(m.Sum(nil))
}

// seal encrypts a stored answer for Redis key rkey.
func (s *IdemSealer) seal(rkey string, plain []byte) ([]byte, error) {
	out := make([]byte, len(sealedPrefix)+s.aead.NonceSize(), len(sealedPrefix)+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	copy(out, sealedPrefix)
	nonce := out[len(sealedPrefix):]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return s.aead.Seal(out, nonce, plain, []byte(rkey)), nil
}

// open decrypts a value stored under rkey; ErrAnswerUnreadable unless it
// was sealed by this key for rkey.
func (s *IdemSealer) open(rkey string, v []byte) ([]byte, error) {
	n := len(sealedPrefix) + s.aead.NonceSize()
	if len(v) < n+s.aead.Overhead() || string(v[:len(sealedPrefix)]) != sealedPrefix {
		return nil, fmt.Errorf("not a sealed answer: %w", ErrAnswerUnreadable)
	}
	p, err := s.aead.Open(nil, v[len(sealedPrefix):n], v[n:], []byte(rkey))
	if err != nil {
		return nil, fmt.Errorf("another key or tampered: %w", ErrAnswerUnreadable)
	}
	return p, nil
}
