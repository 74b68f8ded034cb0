package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// streamSource serves data in reads of at most chunk bytes and reports total as the content length
// (-1: unknown).
type streamSource struct {
	data  []byte
	total int64
	chunk int
}

func (s *streamSource) Open(context.Context, int64) (io.ReadCloser, int64, int64, error) {
	return io.NopCloser(&chunkReader{r: bytes.NewReader(s.data), n: s.chunk}), 0, s.total, nil
}
func (s *streamSource) String() string { return "stream" }

type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// fetchedBytes records the bytes written per download and the evictions.
type fetchedBytes struct {
	mu      sync.Mutex
	fetched map[string]int64
	evicted []string
}

func (f *fetchedBytes) Hit(string) {}
func (f *fetchedBytes) Fetched(h string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetched[h] += n
}
func (f *fetchedBytes) Completed(string, int64, time.Duration) {}
func (f *fetchedBytes) Evicted(h string, _ int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evicted = append(f.evicted, h)
}

// TestDownloadsStayWithinBudget checks that a download never writes more than the disk budget leaves
// it, whether or not the source reports a length.
func TestDownloadsStayWithinBudget(t *testing.T) {
	for _, tc := range []struct {
		name      string
		budget    int64
		existing  []int // entries cached first, oldest first
		size      int   // bytes the source sends
		total     int64 // length it reports (-1: unknown)
		noEvict   bool
		wantErr   error // nil: success
		wantGone  []int
		wantBytes int64 // most bytes the new download may write
	}{
		{name: "unknown length fits", budget: 1000, existing: []int{100}, size: 500, total: -1, wantBytes: 500},
		{name: "unknown length evicts the oldest", budget: 300, existing: []int{100, 100}, size: 150, total: -1, wantGone: []int{0}, wantBytes: 150},
		{name: "unknown length over budget", budget: 300, existing: []int{100}, size: 400, total: -1, wantErr: ErrNoSpace, wantGone: []int{0}, wantBytes: 300},
		{name: "unknown length, no eviction allowed", budget: 300, existing: []int{100, 100}, size: 150, total: -1, noEvict: true, wantErr: ErrNoSpace, wantBytes: 100},
		{name: "source sends more than announced", budget: 1000, size: 400, total: 200, wantErr: errAny, wantBytes: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &fetchedBytes{fetched: map[string]int64{}}
			clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			s, err := Open(t.TempDir(), Options{DiskBudget: tc.budget, Now: clk.Now, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			var hexes []string
			for i, n := range tc.existing {
				data, digest := content(n, uint64(2000+i))
				e, err := s.Ensure(context.Background(), Request{Digest: digest, Source: &bytesSource{data: data, failAfter: -1}})
				if err != nil {
					t.Fatal(err)
				}
				hexes = append(hexes, e.Hex)
			}
			data, digest := content(tc.size, 77)
			_, err = s.Ensure(context.Background(), Request{Digest: digest, NoEvict: tc.noEvict,
				Source: &streamSource{data: data, total: tc.total, chunk: 32}})
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Ensure: %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("Ensure = %v, want %v", err, tc.wantErr)
			}
			h := digest[len(DigestPrefix):]
			if got := obs.fetched[h]; got > tc.wantBytes {
				t.Errorf("the download wrote %d bytes, at most %d fit", got, tc.wantBytes)
			}
			if used := s.UsedBytes(); used > tc.budget {
				t.Errorf("entries use %d bytes over the budget %d", used, tc.budget)
			}
			var gone []string
			for _, i := range tc.wantGone {
				gone = append(gone, hexes[i])
			}
			if !equalStrings(obs.evicted, gone) {
				t.Errorf("evicted %v, want %v", short(obs.evicted), short(gone))
			}
			if tc.wantErr != nil {
				if _, err := os.Stat(filepath.Join(s.Root(), "tmp", h+".partial")); !errors.Is(err, os.ErrNotExist) && errors.Is(tc.wantErr, ErrNoSpace) {
					t.Errorf("a download that cannot fit left its partial file: %v", err)
				}
			}
		})
	}
}

// errAny stands for "any error" in the table above.
var errAny = errors.New("any error")

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
