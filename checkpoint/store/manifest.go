package store

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

// Compression names how chunks of a checkpoint are stored.
type Compression string

// Compression values.
const (
	CompressionNone Compression = "none"
	CompressionZstd Compression = "zstd"
)

// ManifestVersion is the on-disk format this package writes and reads: a signed envelope
// (sign.go) under the namespaced key layout below. Version 1 (unsigned manifests under
// manifests/<agent>/<id>.json and chunks/, shared by every namespace) is refused with
// ErrUnsupportedVersion, never migrated: nothing in a v1 object says which namespace it
// belongs to.
const ManifestVersion = 2

// ErrUnsupportedVersion is wrapped when a stored manifest has another format version.
var ErrUnsupportedVersion = errors.New("unsupported checkpoint manifest version")

// ChunkRef is one chunk of a file, in order.
type ChunkRef struct {
	// SHA256 is the hex sha256 of the uncompressed chunk; it addresses it.
	SHA256 string `json:"sha256"`
	// Size is the uncompressed size.
	Size int64 `json:"size"`
}

// File is one file of a checkpoint image directory.
type File struct {
	// Path is relative to the image directory, "/"-separated.
	Path string `json:"path"`
	// Mode holds the permission bits.
	Mode uint32 `json:"mode"`
	// Size is the file size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex sha256 of the whole file.
	SHA256 string `json:"sha256"`
	// Chunks concatenate to the file.
	Chunks []ChunkRef `json:"chunks"`
}

// Key names a group of checkpoints: dedup of chunks, retention and "latest" are per Key, and
// nothing under one Namespace is ever read or written for another.
type Key struct {
	// Namespace is the Kubernetes namespace the checkpoints belong to (a DNS-1123 label).
	Namespace string `json:"namespace"`
	// Agent groups checkpoints within the namespace (e.g. an AgentClass name).
	Agent string `json:"agent"`
}

// String is "namespace/agent".
func (k Key) String() string { return k.Namespace + "/" + k.Agent }

// Validate checks both parts; the error names the bad field.
func (k Key) Validate() error {
	if err := ValidateNamespace(k.Namespace); err != nil {
		return err
	}
	return ValidateName("agent", k.Agent)
}

// Manifest describes one stored checkpoint.
type Manifest struct {
	// Version is ManifestVersion.
	Version int `json:"version"`
	// Key is where the checkpoint belongs; it is inside the signed bytes, so a manifest
	// copied under another namespace or agent is refused.
	Key
	// ID names the checkpoint within the Key.
	ID string `json:"id"`
	// Created is when the checkpoint was stored (retention's MaxAge). "Latest" does not use
	// it: see Store.List.
	Created time.Time `json:"created"`
	// Compression applies to every chunk of this checkpoint.
	Compression Compression `json:"compression"`
	// Files lists every file of the image directory.
	Files []File `json:"files"`
	// TotalBytes is the sum of file sizes.
	TotalBytes int64 `json:"totalBytes"`
	// NewBytes is how many uncompressed chunk bytes this checkpoint added to
	// the store (the rest were already there).
	NewBytes int64 `json:"newBytes"`
	// StoredBytes is how many bytes were uploaded (after compression).
	StoredBytes int64 `json:"storedBytes"`
	// Labels carry caller metadata (pod, container, node, criu version...).
	Labels map[string]string `json:"labels,omitempty"`
}

var (
	nameRE      = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,252}$`)
	namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	sha256RE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateName checks an agent or checkpoint id: no "/" (so key segments never collide) and
// no "..".
func ValidateName(field, v string) error {
	if !nameRE.MatchString(v) || strings.Contains(v, "..") {
		return fmt.Errorf("invalid %s %q: want [a-zA-Z0-9][a-zA-Z0-9._-]* without \"..\"", field, v)
	}
	return nil
}

// ValidateNamespace checks a Kubernetes namespace name (DNS-1123 label).
func ValidateNamespace(v string) error {
	if !namespaceRE.MatchString(v) {
		return fmt.Errorf("invalid namespace %q: want a DNS-1123 label", v)
	}
	return nil
}

// ValidateSHA256 checks a lowercase hex sha256 (64 characters).
func ValidateSHA256(field, v string) error {
	if !sha256RE.MatchString(v) {
		return fmt.Errorf("%s %q: want 64 lowercase hex characters: %w", field, v, ErrCorrupt)
	}
	return nil
}

// validate checks that m is a well-formed manifest of checkpoint k/id: every hash, path,
// size and name, before any of them is used as a key or a file name.
func (m *Manifest) validate(k Key, id string) error {
	if m.Version != ManifestVersion {
		return fmt.Errorf("version %d, want %d: %w", m.Version, ManifestVersion, ErrUnsupportedVersion)
	}
	if m.Key != k || m.ID != id {
		return fmt.Errorf("names %s/%s: %w", m.Key, m.ID, ErrCorrupt)
	}
	if m.Compression != CompressionNone && m.Compression != CompressionZstd {
		return fmt.Errorf("compression %q: %w", m.Compression, ErrCorrupt)
	}
	var total int64
	for i, f := range m.Files {
		field := fmt.Sprintf("files[%d]", i)
		if f.Path == "" || strings.Contains(f.Path, "..") || path.IsAbs(f.Path) || strings.Contains(f.Path, "\\") {
			return fmt.Errorf("%s.path %q: %w", field, f.Path, ErrCorrupt)
		}
		if err := ValidateSHA256(field+".sha256", f.SHA256); err != nil {
			return err
		}
		if f.Size < 0 {
			return fmt.Errorf("%s.size %d: %w", field, f.Size, ErrCorrupt)
		}
		var sum int64
		for j, c := range f.Chunks {
			if err := ValidateSHA256(fmt.Sprintf("%s.chunks[%d].sha256", field, j), c.SHA256); err != nil {
				return err
			}
			if c.Size <= 0 || c.Size > MaxChunk {
				return fmt.Errorf("%s.chunks[%d].size %d: %w", field, j, c.Size, ErrCorrupt)
			}
			sum += c.Size
		}
		if sum != f.Size {
			return fmt.Errorf("%s (%s): chunks sum to %d bytes, size says %d: %w", field, f.Path, sum, f.Size, ErrCorrupt)
		}
		total += f.Size
	}
	if total != m.TotalBytes {
		return fmt.Errorf("totalBytes %d, files sum to %d: %w", m.TotalBytes, total, ErrCorrupt)
	}
	return nil
}

// Key layout (version 2). Every segment is a validated namespace, name or hex digest, none of
// which contains "/", so two different checkpoints never share a key:
//
//	v2/<namespace>/manifests/<agent>/<id>.json
//	v2/<namespace>/chunks/<sha256[:2]>/<sha256>[.zst]
const layoutPrefix = "v2/"

// legacyManifestKey is where version 1 kept a manifest (only read to explain a refusal).
func legacyManifestKey(agent, id string) string {
	return path.Join("manifests", agent, id+".json")
}

// manifestDir holds the manifests of k.
func manifestDir(k Key) string {
	return layoutPrefix + k.Namespace + "/manifests/" + k.Agent + "/"
}

// manifestKey is where a checkpoint's manifest lives.
func manifestKey(k Key, id string) string {
	return manifestDir(k) + id + ".json"
}

// chunkDir holds the chunks of one namespace.
func chunkDir(namespace string) string {
	return layoutPrefix + namespace + "/chunks/"
}

// chunkKey is where a chunk of namespace lives; compressed chunks carry a suffix so the two
// encodings never collide. It refuses a sum that is not a sha256 hex digest.
func chunkKey(namespace, sum string, c Compression) (string, error) {
	if err := ValidateSHA256("chunk sha256", sum); err != nil {
		return "", err
	}
	k := chunkDir(namespace) + sum[:2] + "/" + sum
	if c == CompressionZstd {
		k += ".zst"
	}
	return k, nil
}
