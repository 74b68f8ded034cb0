package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Ready links. ready/<hex>/ holds hard links to the entry sha256/<hex> under the names pods read it by
// (model.bin, model.gguf, ...), made only once the entry is verified and warm (Expose). A pod mounts
// ready/<hex> (a directory the kubelet creates if missing), so it can wait for its weights by waiting
// for the file to appear, without any access to the node agent. Only files are removed (Unexpose,
// eviction): a directory a pod has mounted stays the one it sees.

// ReadyDir is the directory of hex's ready links.
func (s *Store) ReadyDir(hex string) string { return filepath.Join(s.root, "ready", hex) }

// Expose links the verified entry hex as ready/<hex>/<name>. It is idempotent.
func (s *Store) Expose(hex, name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return fmt.Errorf("ready link name %q: not a file name", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[hex]
	if !ok {
		return fmt.Errorf("entry %s is not cached", hex)
	}
	dir := s.ReadyDir(hex)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("ready dir: %w", err)
	}
	link := filepath.Join(dir, name)
	if fi, err := os.Lstat(link); err == nil {
		if ei, err := os.Stat(e.Path); err == nil && os.SameFile(fi, ei) {
			return nil
		}
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("replace ready link: %w", err)
		}
	}
	if err := os.Link(e.Path, link); err != nil {
		return fmt.Errorf("ready link: %w", err)
	}
	return nil
}

// Exposed reports whether ready/<hex>/<name> exists.
func (s *Store) Exposed(hex, name string) bool {
	_, err := os.Lstat(filepath.Join(s.ReadyDir(hex), name))
	return err == nil
}

// unexposeLocked removes hex's ready links (files only).
func (s *Store) unexposeLocked(hex string) error {
	des, err := os.ReadDir(s.ReadyDir(hex))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := os.Remove(filepath.Join(s.ReadyDir(hex), de.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
