package store

import (
	"fmt"
	"path"
	"regexp"
	"time"
)

// Compression names how chunks of a checkpoint are stored.
type Compression string

// Compression values.
const (
	CompressionNone Compression = "none"
	CompressionZstd Compression = "zstd"
)

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

// Manifest describes one stored checkpoint.
type Manifest struct {
	// Agent groups checkpoints for dedup and retention (e.g. an AgentClass
	// or a pod's agent identity).
	Agent string `json:"agent"`
	// ID names the checkpoint within the agent.
	ID string `json:"id"`
	// Created is when the checkpoint was stored.
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

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,252}$`)

// ValidateName checks an agent or checkpoint id.
func ValidateName(field, v string) error {
	if !nameRE.MatchString(v) {
		return fmt.Errorf("invalid %s %q: want [a-zA-Z0-9][a-zA-Z0-9._-]*", field, v)
	}
	return nil
}

// manifestKey is where a checkpoint's manifest lives.
func manifestKey(agent, id string) string {
	return path.Join("manifests", agent, id+".json")
}

// chunkKey is where a chunk lives; compressed chunks carry a suffix so the
// two encodings never collide.
func chunkKey(sum string, c Compression) string {
	k := path.Join("chunks", sum[:2], sum)
	if c == CompressionZstd {
		k += ".zst"
	}
	return k
}
