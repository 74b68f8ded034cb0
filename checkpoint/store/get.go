package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
)

// Get downloads checkpoint k/id into dstDir (created if needed) after
// verifying its manifest (Manifest), and verifies every chunk and every file
// against the manifest. On any error,
// including corruption (wrapping ErrCorrupt), the files Get created are
// removed, so a caller that restores only after Get succeeds never starts
// from partial or damaged images.
func (s *Store) Get(ctx context.Context, k Key, id, dstDir string, fn ProgressFunc) (*Manifest, error) {
	m, err := s.Manifest(ctx, k, id)
	if err != nil {
		return nil, err
	}
	if err := s.fetch(ctx, m, dstDir, fn); err != nil {
		for _, f := range m.Files {
			_ = os.Remove(filepath.Join(dstDir, filepath.FromSlash(f.Path)))
		}
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Checkpoint fetched", "namespace", k.Namespace, "agent", k.Agent, "id", id, "dir", dstDir, "bytes", m.TotalBytes)
	return m, nil
}

func (s *Store) fetch(ctx context.Context, m *Manifest, dstDir string, fn ProgressFunc) error {
	pr := &progress{fn: fn, p: Progress{Phase: "download", Total: m.TotalBytes}}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.par)
	// fail waits for scheduled chunk writes before the files are closed.
	fail := func(err error) error { _ = g.Wait(); return err }
	for _, f := range m.Files {
		if strings.Contains(f.Path, "..") || filepath.IsAbs(f.Path) {
			return fail(fmt.Errorf("manifest file path %q: %w", f.Path, ErrCorrupt))
		}
		p := filepath.Join(dstDir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fail(fmt.Errorf("create %q: %w", filepath.Dir(p), err))
		}
		fh, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_RDWR, os.FileMode(f.Mode)&0o777)
		if err != nil {
			return fail(fmt.Errorf("create %q: %w", p, err))
		}
		files = append(files, fh)
		var off int64
		for _, c := range f.Chunks {
			c, off0 := c, off
			off += c.Size
			g.Go(func() error {
				buf := chunkBufs.Get().(*[]byte)
				defer chunkBufs.Put(buf)
				data, err := s.readChunk(gctx, m.Namespace, c, m.Compression, (*buf)[:0])
				if err != nil {
					return fmt.Errorf("file %s at offset %d: %w", f.Path, off0, err)
				}
				if _, err := fh.WriteAt(data, off0); err != nil {
					return fmt.Errorf("write %q: %w", p, err)
				}
				pr.add(c.Size, 0)
				return nil
			})
		}
		if off != f.Size {
			return fail(fmt.Errorf("manifest file %s: chunks sum to %d bytes, size says %d: %w", f.Path, off, f.Size, ErrCorrupt))
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if !s.verifyFiles {
		return nil
	}
	// Whole-file digests catch a manifest whose chunk list was tampered with.
	vg, _ := errgroup.WithContext(ctx)
	vg.SetLimit(s.par)
	for i, f := range m.Files {
		fh := files[i]
		vg.Go(func() error {
			h := sha256.New()
			if _, err := io.Copy(h, io.NewSectionReader(fh, 0, f.Size)); err != nil {
				return fmt.Errorf("verify %s: %w", f.Path, err)
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
				return fmt.Errorf("file %s: sha256 %s, manifest says %s: %w", f.Path, got, f.SHA256, ErrCorrupt)
			}
			return nil
		})
	}
	return vg.Wait()
}

// chunkBufs recycles chunk-sized buffers between chunk reads.
var chunkBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, MaxChunk+1)
	return &b
}}

// readChunk fetches, decompresses and verifies one chunk of namespace,
// using buf's capacity when it suffices.
func (s *Store) readChunk(ctx context.Context, namespace string, c ChunkRef, comp Compression, buf []byte) ([]byte, error) {
	key, err := chunkKey(namespace, c.SHA256, comp)
	if err != nil {
		return nil, err
	}
	rc, err := s.b.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w", c.SHA256, err)
	}
	var raw []byte
	if comp == CompressionNone {
		// Uncompressed chunks have a known size: read one extra byte to
		// detect a stored object that is too long.
		if int64(cap(buf)) > c.Size {
			raw = buf[:c.Size+1]
		} else {
			raw = make([]byte, c.Size+1)
		}
		var n int
		n, err = io.ReadFull(rc, raw)
		raw = raw[:n]
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = nil
		}
	} else {
		raw, err = io.ReadAll(rc)
	}
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", c.SHA256, err)
	}
	data := raw
	if comp == CompressionZstd {
		if data, err = s.dec.DecodeAll(raw, buf[:0]); err != nil {
			return nil, fmt.Errorf("chunk %s (%s): zstd: %v: %w", c.SHA256, key, err, ErrCorrupt)
		}
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != c.SHA256 || int64(len(data)) != c.Size {
		return nil, fmt.Errorf("chunk %s (%s): content hashes to %s (%d bytes, want %d): %w", c.SHA256, key, got, len(data), c.Size, ErrCorrupt)
	}
	return data, nil
}
