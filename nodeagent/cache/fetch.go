package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Request asks for one entry.
type Request struct {
	// Digest is "sha256:<hex>" of the content; the fetched bytes must hash to it.
	Digest string
	// Source provides the bytes.
	Source Source
	// Size is the expected content length if known (0 otherwise); used to reserve the disk budget before
	// the source reports a length.
	Size int64
	// NoEvict forbids evicting other entries to make room: the fetch fails with ErrNoSpace instead.
	// Used for opportunistic prewarming of models that no pod on the node uses yet.
	NoEvict bool
	// Urgent marks a fetch for a pod bound to this node: it takes a slot of its own rather than
	// queueing behind prewarm (priority.go).
	Urgent bool
}

// Progress is a snapshot of a running fetch.
type Progress struct {
	// Hex is the entry being fetched.
	Hex string `json:"hex"`
	// Source names where the bytes come from.
	Source string `json:"source"`
	// Done is the number of bytes in the partial file, including bytes resumed from an earlier attempt.
	Done int64 `json:"done"`
	// Total is the content length, or -1 when unknown.
	Total int64 `json:"total"`
	// BytesPerSecond is the transfer rate of this attempt.
	BytesPerSecond float64 `json:"bytesPerSecond"`
	// ETA is the estimated time left, 0 when unknown.
	ETA time.Duration `json:"eta"`
}

// Progress returns the running fetches.
func (s *Store) Progress() []Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Progress, 0, len(s.progress))
	for _, p := range s.progress {
		out = append(out, p)
	}
	return out
}

// Ensure returns the verified entry for req.Digest, fetching it from req.Source if it is not cached.
// Concurrent calls for the same digest share one fetch; at most Options.MaxConcurrent fetches run at
// once. An interrupted fetch leaves tmp/<hex>.partial behind and the next call resumes it.
func (s *Store) Ensure(ctx context.Context, req Request) (Entry, error) {
	h, err := ParseDigest(req.Digest)
	if err != nil {
		return Entry{}, err
	}
	if e, ok := s.Lookup(h); ok {
		if s.opts.Observer != nil {
			s.opts.Observer.Hit(h)
		}
		return e, nil
	}
	if req.Source == nil {
		return Entry{}, fmt.Errorf("entry %s is not cached and the request has no source", h)
	}
	v, err, _ := s.sf.Do(h, func() (any, error) {
		return s.fetch(ctx, h, req)
	})
	if err != nil {
		return Entry{}, err
	}
	return v.(Entry), nil
}

func (s *Store) fetch(ctx context.Context, h string, req Request) (Entry, error) {
	release, err := s.acquire(ctx, h, req.Urgent)
	if err != nil {
		return Entry{}, err
	}
	defer release()

	unlock, err := s.lockDigest(ctx, h)
	if err != nil {
		return Entry{}, err
	}
	defer unlock()
	// Another process (an earlier agent, a peer) may have completed it meanwhile.
	if e, ok := s.adoptExisting(h); ok {
		return e, nil
	}
	defer func() {
		s.mu.Lock()
		delete(s.inflight, h)
		delete(s.progress, h)
		s.mu.Unlock()
	}()
	start := s.opts.Now()
	e, resumed, err := s.download(ctx, h, req)
	if errors.Is(err, ErrDigestMismatch) && resumed {
		// The kept prefix may come from content that has changed since: restart from scratch once.
		klog.FromContext(ctx).Info("Resumed download failed verification, restarting", "digest", h, "source", req.Source.String())
		e, _, err = s.download(ctx, h, req)
	}
	if err != nil {
		return Entry{}, err
	}
	if s.opts.Observer != nil {
		s.opts.Observer.Completed(h, e.Size, s.opts.Now().Sub(start))
	}
	return e, nil
}

// adoptExisting indexes an entry file that exists on disk but not in memory.
func (s *Store) adoptExisting(h string) (Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[h]; ok {
		return s.copyLocked(e), true
	}
	info, err := os.Stat(s.EntryPath(h))
	if err != nil || !info.Mode().IsRegular() {
		return Entry{}, false
	}
	e := &Entry{Hex: h, Path: s.EntryPath(h), Size: info.Size()}
	s.entries[h] = e
	s.touchLocked(e)
	return s.copyLocked(e), true
}

// lockDigest takes an exclusive flock on tmp/<hex>.lock so that two processes never write the same
// partial file. The kernel drops the lock when a process dies, so a SIGKILLed agent never blocks the
// next one.
func (s *Store) lockDigest(ctx context.Context, h string) (func(), error) {
	p := filepath.Join(s.tmpDir(), h+".lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return func() { f.Close() }, nil
}

// download fetches into tmp/<hex>.partial, resuming from its current length, verifies the digest and
// renames it into place. resumed reports whether bytes of an earlier attempt were kept. On a digest
// mismatch the partial file is deleted.
func (s *Store) download(ctx context.Context, h string, req Request) (e Entry, resumed bool, err error) {
	log := klog.FromContext(ctx).WithValues("digest", h, "source", req.Source.String())
	partial := filepath.Join(s.tmpDir(), h+".partial")
	f, err := os.OpenFile(partial, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Entry{}, false, fmt.Errorf("partial file: %w", err)
	}
	defer f.Close()
	hasher := sha256.New()
	have, err := hashPrefix(f, hasher)
	if err != nil {
		return Entry{}, false, err
	}
	rc, at, total, err := req.Source.Open(ctx, have)
	if err != nil {
		return Entry{}, false, fmt.Errorf("fetch %s: %w", h, err)
	}
	defer rc.Close()
	if at != have { // the source restarted from 0: drop what we had
		hasher.Reset()
		if err := f.Truncate(0); err != nil {
			return Entry{}, false, fmt.Errorf("truncate partial: %w", err)
		}
		have = 0
	}
	resumed = have > 0
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return Entry{}, resumed, fmt.Errorf("seek partial: %w", err)
	}
	// The partial file is held to its reservation: of total bytes when the source reports it, else of
	// req.Size or what is already there, grown as more bytes arrive (budget.go).
	need := total
	if need < 0 {
		need = max(req.Size, have)
	}
	bw := &budgetWriter{s: s, log: log, h: h, w: f, written: have, known: total >= 0, mayEvict: !req.NoEvict}
	if err := bw.reserve(need); err != nil {
		return Entry{}, resumed, err
	}
	if resumed {
		log.Info("Resuming download", "offset", have, "total", total)
	} else {
		log.Info("Starting download", "total", total)
	}

	done, err := s.copyWithProgress(ctx, log, h, req.Source.String(), bw, io.TeeReader(rc, hasher), have, total)
	if errors.Is(err, ErrNoSpace) {
		_ = os.Remove(partial) // it cannot complete; keep no bytes past the budget
	}
	if err != nil {
		return Entry{}, resumed, err
	}
	if total >= 0 && done != total {
		return Entry{}, resumed, fmt.Errorf("fetch %s: source ended at %d of %d bytes", h, done, total)
	}
	if hex.EncodeToString(hasher.Sum(nil)) != h {
		_ = os.Remove(partial)
		// Invariant: the computed hash is never reported (logs included): with it, a source the
		// user names would become a way to read its content's hash into a world-readable status.
		return Entry{}, resumed, fmt.Errorf("fetch %s from %s: content does not match spec.digest: %w", h, req.Source, ErrDigestMismatch)
	}
	if err := f.Sync(); err != nil {
		return Entry{}, resumed, fmt.Errorf("sync partial: %w", err)
	}
	if err := f.Chmod(0o444); err != nil {
		return Entry{}, resumed, fmt.Errorf("chmod partial: %w", err)
	}
	// Invariant: the rename is the only way an entry appears, and it happens after verification.
	if err := os.Rename(partial, s.EntryPath(h)); err != nil {
		return Entry{}, resumed, fmt.Errorf("publish entry: %w", err)
	}
	syncDir(s.entryDir())
	_ = os.Remove(filepath.Join(s.tmpDir(), h+".lock"))
	s.mu.Lock()
	ent := &Entry{Hex: h, Path: s.EntryPath(h), Size: done}
	s.entries[h] = ent
	s.touchLocked(ent)
	out := s.copyLocked(ent)
	s.mu.Unlock()
	log.Info("Entry verified and cached", "size", done)
	return out, resumed, nil
}

// copyWithProgress copies r into w, recording progress under s.progress and logging it every
// ProgressInterval. It returns the total bytes now in the partial file (have + copied).
func (s *Store) copyWithProgress(ctx context.Context, log klog.Logger, h, src string, w io.Writer, r io.Reader, have, total int64) (int64, error) {
	buf := make([]byte, 1<<20)
	start := s.opts.Now()
	lastReport := start
	done := have
	for {
		if err := ctxDone(ctx); err != nil {
			return done, err
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return done, fmt.Errorf("write partial: %w", err)
			}
			done += int64(n)
			if s.opts.Observer != nil {
				s.opts.Observer.Fetched(h, int64(n))
			}
			now := s.opts.Now()
			p := Progress{Hex: h, Source: src, Done: done, Total: total}
			if el := now.Sub(start).Seconds(); el > 0 {
				p.BytesPerSecond = float64(done-have) / el
				if total > 0 && p.BytesPerSecond > 0 {
					p.ETA = time.Duration(float64(total-done) / p.BytesPerSecond * float64(time.Second))
				}
			}
			s.mu.Lock()
			s.progress[h] = p
			s.mu.Unlock()
			if now.Sub(lastReport) >= s.opts.ProgressInterval {
				lastReport = now
				log.Info("Download progress", "bytes", done, "total", total, "bytesPerSecond", int64(p.BytesPerSecond), "eta", p.ETA.Round(time.Second).String())
			}
		}
		if rerr == io.EOF {
			return done, nil
		}
		if rerr != nil {
			return done, fmt.Errorf("read source: %w", rerr)
		}
	}
}

// hashPrefix feeds the existing content of f into h and returns its length.
func hashPrefix(f *os.File, h hash.Hash) (int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("seek partial: %w", err)
	}
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, fmt.Errorf("hash partial: %w", err)
	}
	return n, nil
}

// Verify re-hashes the entry hex and removes it if its content no longer matches.
func (s *Store) Verify(h string) error {
	f, err := os.Open(s.EntryPath(h))
	if err != nil {
		return fmt.Errorf("verify %s: %w", h, err)
	}
	defer f.Close()
	hasher := sha256.New()
	if _, err := io.Copy(hasher, f); err != nil {
		return fmt.Errorf("verify %s: %w", h, err)
	}
	if hex.EncodeToString(hasher.Sum(nil)) != h {
		s.mu.Lock()
		if e, ok := s.entries[h]; ok {
			_ = s.removeLocked(e)
		}
		s.mu.Unlock()
		return fmt.Errorf("verify %s: content no longer matches its digest: %w", h, ErrDigestMismatch)
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
