package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
)

// ErrCorrupt is wrapped by Get when stored data does not match its manifest.
var ErrCorrupt = errors.New("checkpoint data corrupt")

// Progress reports bytes moved by Put or Get.
type Progress struct {
	// Phase is "upload" or "download".
	Phase string
	// Done and Total count uncompressed bytes of the image files.
	Done, Total int64
	// NewBytes counts bytes of chunks that were not yet stored (upload).
	NewBytes int64
}

// ProgressFunc receives progress; it is called from one goroutine at a time.
type ProgressFunc func(Progress)

// Options configure a Store.
type Options struct {
	// Compression of new chunks; empty means zstd for remote backends and
	// none for local ones.
	Compression Compression
	// Parallel is how many chunks move at once; 0 means 4.
	Parallel int
	// VerifyFiles re-hashes every fetched file against its manifest sha256
	// in addition to the per-chunk sha256 checks Get always does. The chunk
	// checks already catch any corrupt or missing stored byte; this second
	// pass also catches a manifest whose chunk list disagrees with its file
	// digests, at the cost of hashing the image twice.
	VerifyFiles bool
	// Signer signs every manifest Put writes and verifies every manifest read; required.
	Signer *Signer
}

// Store is the checkpoint image store over one Backend.
type Store struct {
	b    Backend
	comp Compression
	par  int
	// verifyFiles: see Options.VerifyFiles.
	verifyFiles bool
	signer      *Signer
	enc         *zstd.Encoder
	dec         *zstd.Decoder
	// mu serializes Put against Prune in this process.
	mu sync.RWMutex
}

// New returns a store over b.
func New(b Backend, opts Options) (*Store, error) {
	if opts.Signer == nil {
		return nil, fmt.Errorf("checkpoint store: Options.Signer is required (manifests are signed)")
	}
	s := &Store{b: b, comp: opts.Compression, par: opts.Parallel, verifyFiles: opts.VerifyFiles, signer: opts.Signer}
	if s.comp == "" {
		s.comp = CompressionNone
		if b.Remote() {
			s.comp = CompressionZstd
		}
	}
	if s.comp != CompressionNone && s.comp != CompressionZstd {
		return nil, fmt.Errorf("invalid Compression %q", s.comp)
	}
	if s.par <= 0 {
		s.par = 4
	}
	var err error
	if s.enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1)); err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	if s.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0)); err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return s, nil
}

// Backend returns the store's backend.
func (s *Store) Backend() Backend { return s.b }

// progress serializes progress callbacks.
type progress struct {
	mu  sync.Mutex
	fn  ProgressFunc
	p   Progress
	new atomic.Int64
}

func (p *progress) add(done, newBytes int64) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Done += done
	p.p.NewBytes += newBytes
	p.fn(p.p)
}

// Put stores every regular file under srcDir as checkpoint k/id and
// returns its manifest. Chunks already stored for k's namespace are not
// uploaded again. The signed manifest is written last, so a failed Put
// leaves no visible checkpoint.
func (s *Store) Put(ctx context.Context, k Key, id, srcDir string, labels map[string]string, fn ProgressFunc) (*Manifest, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if err := ValidateName("id", id); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	logger := klog.FromContext(ctx)
	m := &Manifest{Version: ManifestVersion, Key: k, ID: id, Created: time.Now().UTC(), Compression: s.comp, Labels: labels}
	err := filepath.WalkDir(srcDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(srcDir, p)
		m.Files = append(m.Files, File{Path: filepath.ToSlash(rel), Mode: uint32(info.Mode().Perm()), Size: info.Size()})
		m.TotalBytes += info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %q: %w", srcDir, err)
	}
	pr := &progress{fn: fn, p: Progress{Phase: "upload", Total: m.TotalBytes}}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.par)
	var inflight sync.Map // chunk sums being uploaded in this Put
	var newBytes, stored atomic.Int64
	for i := range m.Files {
		f := &m.Files[i]
		if err := s.putFile(gctx, g, k.Namespace, filepath.Join(srcDir, filepath.FromSlash(f.Path)), f, &inflight, &newBytes, &stored, pr); err != nil {
			_ = g.Wait()
			return nil, err
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	m.NewBytes, m.StoredBytes = newBytes.Load(), stored.Load()
	if err := m.validate(k, id); err != nil {
		return nil, fmt.Errorf("manifest of %s/%s: %w", k, id, err)
	}
	b, err := s.signer.seal(m)
	if err != nil {
		return nil, err
	}
	if err := s.b.Put(ctx, manifestKey(k, id), bytes.NewReader(b), int64(len(b))); err != nil {
		return nil, fmt.Errorf("write manifest %s/%s: %w", k, id, err)
	}
	logger.V(2).Info("Checkpoint stored", "namespace", k.Namespace, "agent", k.Agent, "id", id, "files", len(m.Files), "totalBytes", m.TotalBytes, "newBytes", m.NewBytes, "storedBytes", m.StoredBytes)
	return m, nil
}

// putFile chunks one file, hashing it whole, and schedules chunk uploads on g.
func (s *Store) putFile(ctx context.Context, g *errgroup.Group, namespace, path string, f *File, inflight *sync.Map, newBytes, stored *atomic.Int64, pr *progress) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %q: %w", path, err)
	}
	defer fh.Close()
	whole := sha256.New()
	c := NewChunker(io.TeeReader(fh, whole))
	for {
		chunk, err := c.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("chunk %q: %w", path, err)
		}
		sum := sha256.Sum256(chunk)
		ref := ChunkRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(chunk))}
		f.Chunks = append(f.Chunks, ref)
		if _, dup := inflight.LoadOrStore(ref.SHA256, true); dup {
			pr.add(ref.Size, 0)
			continue
		}
		data := append([]byte(nil), chunk...) // the chunker reuses its buffer
		key, err := chunkKey(namespace, ref.SHA256, s.comp)
		if err != nil {
			return err
		}
		g.Go(func() error {
			ok, err := s.b.Exists(ctx, key)
			if err != nil {
				return fmt.Errorf("stat chunk %s: %w", ref.SHA256, err)
			}
			if ok {
				pr.add(ref.Size, 0)
				return nil
			}
			body := data
			if s.comp == CompressionZstd {
				body = s.enc.EncodeAll(data, nil)
			}
			if err := s.b.Put(ctx, key, bytes.NewReader(body), int64(len(body))); err != nil {
				return fmt.Errorf("upload chunk %s: %w", ref.SHA256, err)
			}
			newBytes.Add(ref.Size)
			stored.Add(int64(len(body)))
			pr.add(ref.Size, ref.Size)
			return nil
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	f.SHA256 = hex.EncodeToString(whole.Sum(nil))
	return nil
}

// Manifest reads and verifies the manifest of k/id (signature, then every field). A
// checkpoint only present in the version 1 layout is refused with ErrUnsupportedVersion.
func (s *Store) Manifest(ctx context.Context, k Key, id string) (*Manifest, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if err := ValidateName("id", id); err != nil {
		return nil, err
	}
	rc, err := s.b.Get(ctx, manifestKey(k, id))
	if errors.Is(err, ErrNotFound) {
		if ok, _ := s.b.Exists(ctx, legacyManifestKey(k.Agent, id)); ok {
			return nil, fmt.Errorf("checkpoint %s/%s exists only as an unsigned version 1 manifest (%s), which names no namespace and is not restored; take a new checkpoint: %w",
				k, id, legacyManifestKey(k.Agent, id), ErrUnsupportedVersion)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s/%s: %w", k, id, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s/%s manifest: %w", k, id, err)
	}
	if len(raw) > maxManifestBytes {
		return nil, fmt.Errorf("checkpoint %s/%s manifest over %d bytes: %w", k, id, maxManifestBytes, ErrCorrupt)
	}
	return s.signer.open(raw, k, id)
}

// maxManifestBytes bounds a manifest read (a 100 GiB image of 4 KiB-average chunks is under
// this).
const maxManifestBytes = 256 << 20

// List returns the manifests of k in the order the backend stored them, oldest first: by the
// backend's own modification time of the manifest object (the filesystem's, or the S3
// server's LastModified), ties broken by Created and then ID. No field a manifest claims
// decides which is the latest.
func (s *Store) List(ctx context.Context, k Key) ([]*Manifest, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	objs, err := s.b.List(ctx, manifestDir(k))
	if err != nil {
		return nil, err
	}
	type entry struct {
		m       *Manifest
		written time.Time
	}
	var es []entry
	for _, o := range objs {
		name := strings.TrimPrefix(o.Key, manifestDir(k))
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || strings.Contains(id, "/") {
			continue
		}
		m, err := s.Manifest(ctx, k, id)
		if err != nil {
			return nil, err
		}
		es = append(es, entry{m, o.ModTime})
	}
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if !a.written.Equal(b.written) {
			return a.written.Before(b.written)
		}
		if !a.m.Created.Equal(b.m.Created) {
			return a.m.Created.Before(b.m.Created)
		}
		return a.m.ID < b.m.ID
	})
	out := make([]*Manifest, len(es))
	for i, e := range es {
		out[i] = e.m
	}
	return out, nil
}

// Latest returns the checkpoint of k the backend stored last (List's order), wrapping
// ErrNotFound if none.
func (s *Store) Latest(ctx context.Context, k Key) (*Manifest, error) {
	ms, err := s.List(ctx, k)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no checkpoint for %s: %w", k, ErrNotFound)
	}
	return ms[len(ms)-1], nil
}
