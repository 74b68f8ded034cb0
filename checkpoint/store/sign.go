package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// ErrBadSignature is wrapped when a manifest's signature does not verify: it was not written
// by a holder of the store's signing key, or was changed since.
var ErrBadSignature = errors.New("checkpoint manifest signature invalid")

// MinKeyBytes is the shortest signing key NewSigner accepts.
const MinKeyBytes = 32

// signDomain separates manifest MACs from any other use of the key.
const signDomain = "neuronetes.io/checkpoint-manifest/v2\x00"

// Signer signs and verifies manifests with HMAC-SHA256. Its key is held by the node agents
// only (a Secret in the release namespace mounted into the node agent): a tenant, or anyone
// who can write the bucket but not read that key, cannot produce a manifest the store accepts.
type Signer struct {
	key []byte
}

// NewSigner returns a signer over key, which must hold at least MinKeyBytes bytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("checkpoint signing key: %d bytes, want at least %d", len(key), MinKeyBytes)
	}
	return &Signer{key: bytes.Clone(key)}, nil
}

// LoadSigner reads a signing key file; surrounding whitespace (a trailing newline) is dropped.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint signing key: %w", err)
	}
	s, err := NewSigner(bytes.TrimSpace(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func (s *Signer) mac(payload []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(signDomain))
	h.Write(payload)
	return h.Sum(nil)
}

// envelope is the stored form of a manifest: the manifest's compact JSON, and the MAC over
// exactly those bytes (the envelope is written compact too, so they are stored verbatim). Version is outside the MAC only so that another version is reported as such.
type envelope struct {
	Version  int             `json:"version"`
	Manifest json.RawMessage `json:"manifest"`
	// HMACSHA256 is hex.
	HMACSHA256 string `json:"hmacSHA256"`
}

// seal encodes and signs m.
func (s *Signer) seal(m *Manifest) ([]byte, error) {
	payload, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	b, err := json.Marshal(envelope{Version: ManifestVersion, Manifest: payload, HMACSHA256: hex.EncodeToString(s.mac(payload))})
	if err != nil {
		return nil, fmt.Errorf("encode manifest envelope: %w", err)
	}
	return b, nil
}

// open verifies a stored envelope and returns the manifest of k/id it holds. The signature is
// checked before the manifest is decoded, and the decoded manifest must name k/id and pass
// validate, so nothing in it reaches a key, a file name or CRIU unverified.
func (s *Signer) open(raw []byte, k Key, id string) (*Manifest, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("checkpoint %s/%s manifest: %w: %v", k, id, ErrCorrupt, err)
	}
	if env.Version != ManifestVersion {
		return nil, fmt.Errorf("checkpoint %s/%s: manifest version %d, want %d: %w", k, id, env.Version, ManifestVersion, ErrUnsupportedVersion)
	}
	want := s.mac(env.Manifest)
	got, err := hex.DecodeString(env.HMACSHA256)
	if err != nil || !hmac.Equal(got, want) {
		return nil, fmt.Errorf("checkpoint %s/%s: %w", k, id, ErrBadSignature)
	}
	var m Manifest
	if err := json.Unmarshal(env.Manifest, &m); err != nil {
		return nil, fmt.Errorf("checkpoint %s/%s manifest: %w: %v", k, id, ErrCorrupt, err)
	}
	if err := m.validate(k, id); err != nil {
		return nil, fmt.Errorf("checkpoint %s/%s manifest: %w", k, id, err)
	}
	return &m, nil
}
