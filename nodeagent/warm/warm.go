// Package warm brings files into the page cache and keeps them there: parallel MADV_POPULATE_READ (or
// parallel pread as a fallback), residency measured with mincore, optional mlock within a budget, and
// dropping cold files with POSIX_FADV_DONTNEED to honour a memory budget.
package warm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Method selects how a file is read into the page cache.
type Method string

const (
	// MethodPopulate maps the file and faults it in with madvise(MADV_POPULATE_READ), one chunk per
	// worker (Linux >= 5.14). It falls back to MethodPread where the kernel rejects the advice.
	MethodPopulate Method = "populate"
	// MethodPread reads the file with parallel pread(2) into scratch buffers.
	MethodPread Method = "pread"
)

// Options tune Warm.
type Options struct {
	// Method is MethodPopulate when empty.
	Method Method
	// Parallel is the number of workers; 0 means 4 (the measured sweet spot on this kind of disk).
	Parallel int
	// ChunkBytes is the unit of work per worker step; 0 means 32 MiB.
	ChunkBytes int64
}

// Result describes one Warm call.
type Result struct {
	// Bytes is the file size.
	Bytes int64
	// Duration is the wall time of the call.
	Duration time.Duration
	// Method is what actually ran (after any fallback).
	Method Method
}

// Warm reads path into the page cache with opts.
func Warm(ctx context.Context, path string, opts Options) (Result, error) {
	if opts.Method == "" {
		opts.Method = MethodPopulate
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.ChunkBytes <= 0 {
		opts.ChunkBytes = 32 << 20
	}
	pg := int64(os.Getpagesize())
	opts.ChunkBytes = (opts.ChunkBytes + pg - 1) / pg * pg
	f, err := os.Open(path)
	if err != nil {
		return Result{}, fmt.Errorf("warm: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Result{}, fmt.Errorf("warm: %w", err)
	}
	start := time.Now()
	res := Result{Bytes: st.Size(), Method: opts.Method}
	if st.Size() == 0 {
		return res, nil
	}
	switch opts.Method {
	case MethodPopulate:
		err = populate(ctx, f, st.Size(), opts)
		if errors.Is(err, unix.EINVAL) {
			res.Method = MethodPread
			err = preadAll(ctx, f, st.Size(), opts)
		}
	case MethodPread:
		err = preadAll(ctx, f, st.Size(), opts)
	default:
		return Result{}, fmt.Errorf("warm: unknown method %q", opts.Method)
	}
	res.Duration = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("warm %s: %w", path, err)
	}
	return res, nil
}

// forChunks runs fn over [0,size) split into chunk-sized pieces on n workers, stopping at the first
// error or when ctx ends.
func forChunks(ctx context.Context, size int64, opts Options, fn func(off, n int64) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range opts.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				off := next.Add(opts.ChunkBytes) - opts.ChunkBytes
				if off >= size || ctx.Err() != nil {
					return
				}
				if err := fn(off, min(opts.ChunkBytes, size-off)); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func populate(ctx context.Context, f *os.File, size int64, opts Options) error {
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	defer unix.Munmap(m)
	return forChunks(ctx, size, opts, func(off, n int64) error {
		if err := unix.Madvise(m[off:off+n], unix.MADV_POPULATE_READ); err != nil {
			return fmt.Errorf("madvise(MADV_POPULATE_READ) at %d: %w", off, err)
		}
		return nil
	})
}

func preadAll(ctx context.Context, f *os.File, size int64, opts Options) error {
	bufs := sync.Pool{New: func() any { b := make([]byte, opts.ChunkBytes); return &b }}
	return forChunks(ctx, size, opts, func(off, n int64) error {
		bp := bufs.Get().(*[]byte)
		defer bufs.Put(bp)
		if _, err := f.ReadAt((*bp)[:n], off); err != nil {
			return fmt.Errorf("pread at %d: %w", off, err)
		}
		return nil
	})
}

// Resident returns how many bytes of path are in the page cache (mincore) and the file size.
func Resident(path string) (resident, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("resident: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("resident: %w", err)
	}
	if st.Size() == 0 {
		return 0, 0, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, fmt.Errorf("resident: mmap: %w", err)
	}
	defer unix.Munmap(m)
	pg := int64(os.Getpagesize())
	vec := make([]byte, (st.Size()+pg-1)/pg)
	if err := mincore(m, vec); err != nil {
		return 0, 0, fmt.Errorf("resident: mincore: %w", err)
	}
	for i, v := range vec {
		if v&1 != 0 {
			resident += min(pg, st.Size()-int64(i)*pg)
		}
	}
	return resident, st.Size(), nil
}

// Drop asks the kernel to evict path's pages from the page cache (POSIX_FADV_DONTNEED). Pages that
// are mapped or locked elsewhere stay.
func Drop(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop %s: %w", path, err)
	}
	return nil
}

// mincore wraps mincore(2), which x/sys/unix does not export on linux/amd64.
func mincore(b []byte, vec []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}
