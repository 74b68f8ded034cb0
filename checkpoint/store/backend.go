// Package store keeps checkpoint images in a content-addressed store:
// files are split into content-defined chunks addressed by their sha256,
// each checkpoint has a manifest listing every file with its sha256 and
// chunks, and chunks shared between checkpoints are stored once.
//
// Backends are a local directory (or PV) and S3-compatible object storage.
// Chunks are zstd-compressed for remote backends only: compressing for a
// local directory or tmpfs slows the restore more than it saves.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotFound is wrapped by backends when a key does not exist.
var ErrNotFound = errors.New("not found")

// Object describes a stored object.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Backend is flat key/value object storage. Keys use "/" separators.
// Implementations must make Put atomic: a reader sees the whole object or
// none of it.
type Backend interface {
	// Put stores size bytes from r under key.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens key for reading; it wraps ErrNotFound if absent.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Exists reports whether key exists.
	Exists(ctx context.Context, key string) (bool, error)
	// List returns the objects whose key starts with prefix.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Remote reports whether the backend is across a network, which turns on
	// chunk compression by default.
	Remote() bool
}

// Dir is a Backend on a local directory or mounted PV.
type Dir struct {
	// Root is the directory holding the objects.
	Root string
}

// NewDir returns a directory backend, creating root.
func NewDir(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("store root %q: %w", root, err)
	}
	return &Dir{Root: root}, nil
}

func (d *Dir) path(key string) (string, error) {
	clean := filepath.Clean("/" + key)
	if clean == "/" || strings.Contains(key, "..") {
		return "", fmt.Errorf("invalid key %q", key)
	}
	return filepath.Join(d.Root, clean), nil
}

// Put implements Backend: it writes a temp file and renames it into place.
func (d *Dir) Put(_ context.Context, key string, r io.Reader, _ int64) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("put %q: %w", key, err)
	}
	return nil
}

// Get implements Backend.
func (d *Dir) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("get %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	return f, nil
}

// Exists implements Backend.
func (d *Dir) Exists(_ context.Context, key string) (bool, error) {
	p, err := d.path(key)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// List implements Backend.
func (d *Dir) List(_ context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := filepath.WalkDir(d.Root, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".tmp-") {
			return nil
		}
		rel, _ := filepath.Rel(d.Root, p)
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil // removed concurrently
		}
		out = append(out, Object{Key: key, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	return out, nil
}

// Delete implements Backend.
func (d *Dir) Delete(_ context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	return nil
}

// Remote implements Backend: a directory is local.
func (d *Dir) Remote() bool { return false }
