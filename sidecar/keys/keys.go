// Package keys loads the per-tenant data-encryption keys of the sidecar from a
// mounted Kubernetes Secret directory and derives per-tenant AEAD keys.
//
// Directory layout (one Secret per namespace or tenant, mounted read-only):
//
//	<dir>/active      the id of the key used for new writes (one line)
//	<dir>/<key-id>    32 raw bytes, or the standard/URL base64 encoding of 32 bytes
//
// Key ids match [A-Za-z0-9_-]{1,64}. Names starting with "." (the Secret
// volume's ..data links) are ignored. Rotation: add a new key file, point
// "active" at it, and keep the old files as long as old ciphertexts live (at
// most the longest session TTL); readers resolve the key id stored in each
// frame.
package keys

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// KeySize is the size in bytes of every key in a Ring (AES-256).
const KeySize = 32

// ActiveFile is the name of the file that names the active key id.
const ActiveFile = "active"

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ErrUnknownKey is returned when a frame names a key id that the ring lacks.
var ErrUnknownKey = errors.New("unknown key id")

// ErrNoKeys is returned by an empty ring: no keys are configured (yet).
var ErrNoKeys = errors.New("no encryption keys configured")

// Empty returns a ring without keys. Every Derive fails with ErrNoKeys, so
// nothing can be sealed or opened until a real ring replaces it.
func Empty() *Ring { return &Ring{keys: map[string][]byte{}} }

// ValidID reports whether id is an acceptable key id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Ring is an immutable set of keys with one active key. The zero value is not
// usable; build one with NewRing or Load.
type Ring struct {
	active string
	keys   map[string][]byte
}

// NewRing builds a ring from raw keys. active must name one of them.
func NewRing(active string, raw map[string][]byte) (*Ring, error) {
	r := &Ring{active: active, keys: make(map[string][]byte, len(raw))}
	for id, k := range raw {
		if !ValidID(id) {
			return nil, fmt.Errorf("key id %q: must match %s", id, idPattern)
		}
		if len(k) != KeySize {
			return nil, fmt.Errorf("key %q: length %d, want %d", id, len(k), KeySize)
		}
		r.keys[id] = append([]byte(nil), k...)
	}
	if _, ok := r.keys[active]; !ok {
		return nil, fmt.Errorf("active key %q: %w", active, ErrUnknownKey)
	}
	return r, nil
}

// Load reads a key ring from dir (see the package documentation for the layout).
func Load(dir string) (*Ring, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("keys dir %s: %w", dir, err)
	}
	raw := map[string][]byte{}
	active := ""
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path) // follows the Secret volume's symlinks
		if err != nil {
			return nil, fmt.Errorf("key file %s: %w", path, err)
		}
		if name == ActiveFile {
			active = strings.TrimSpace(string(b))
			continue
		}
		k, err := decodeKey(b)
		if err != nil {
			return nil, fmt.Errorf("key file %s: %w", path, err)
		}
		raw[name] = k
	}
	if active == "" {
		if len(raw) != 1 {
			return nil, fmt.Errorf("keys dir %s: file %q missing and %d keys present", dir, ActiveFile, len(raw))
		}
		for id := range raw {
			active = id
		}
	}
	return NewRing(active, raw)
}

func decodeKey(b []byte) ([]byte, error) {
	if len(b) == KeySize {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("content: want %d raw bytes or their base64 encoding, got %d bytes", KeySize, len(b))
}

// Active returns the id of the key used for new writes ("" for an empty ring).
func (r *Ring) Active() string { return r.active }

// IDs returns the sorted ids of all keys in the ring.
func (r *Ring) IDs() []string {
	ids := make([]string, 0, len(r.keys))
	for id := range r.keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Derive returns the AEAD key for (key id, tenant): HKDF-SHA256 of the secret
// key with the tenant as info. Two tenants sharing one Secret by mistake still
// get unrelated keys.
func (r *Ring) Derive(id, tenant string) ([]byte, error) {
	if len(r.keys) == 0 {
		return nil, ErrNoKeys
	}
	k, ok := r.keys[id]
	if !ok {
		return nil, fmt.Errorf("key %q: %w", id, ErrUnknownKey)
	}
	out, err := hkdf.Key(sha256.New, k, []byte("neuronetes-sidecar-v1"), "tenant:"+tenant, KeySize)
	if err != nil {
		return nil, fmt.Errorf("derive key %q: %w", id, err)
	}
	return out, nil
}
