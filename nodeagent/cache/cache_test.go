package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/internal/egress"
)

func content(n int, seed uint64) ([]byte, string) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	s := sha256.Sum256(b)
	return b, DigestPrefix + hex.EncodeToString(s[:])
}

// bytesSource serves an in-memory blob, optionally failing after failAfter bytes of the first open.
type bytesSource struct {
	data      []byte
	failAfter int64 // <0: never
	opens     atomic.Int32
	offsets   []int64
	mu        sync.Mutex
}

func (b *bytesSource) Open(_ context.Context, off int64) (io.ReadCloser, int64, int64, error) {
	n := b.opens.Add(1)
	b.mu.Lock()
	b.offsets = append(b.offsets, off)
	b.mu.Unlock()
	var r io.Reader = bytes.NewReader(b.data[off:])
	if n == 1 && b.failAfter >= 0 {
		r = io.MultiReader(io.LimitReader(r, b.failAfter-off), errReader{})
	}
	return io.NopCloser(r), off, int64(len(b.data)), nil
}
func (b *bytesSource) String() string { return "mem" }

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestParseDigest(t *testing.T) {
	good := "sha256:" + fmt.Sprintf("%064x", 1)
	tests := []struct {
		in      string
		wantErr bool
	}{
		{good, false},
		{"sha512:" + good[7:], true},
		{"sha256:abc", true},
		{"sha256:" + fmt.Sprintf("%064X", 0xABCDEF), true},
		{"sha256:../" + good[10:], true},
	}
	for _, tt := range tests {
		_, err := ParseDigest(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseDigest(%q) err=%v, wantErr %v", tt.in, err, tt.wantErr)
		}
	}
}

func TestEnsureRejectsDigestMismatch(t *testing.T) {
	data, _ := content(100_000, 1)
	_, otherDigest := content(10, 2)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "x", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	for _, tt := range []struct {
		name string
		uri  string
	}{
		{"file", "file://" + src},
		{"http", srv.URL + "/m.bin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(filepath.Join(dir, tt.name), Options{})
			if err != nil {
				t.Fatal(err)
			}
			source, err := NewSource(tt.uri, SourceOptions{FileRoots: []string{dir}, Egress: egress.AllowLoopback()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Ensure(context.Background(), Request{Digest: otherDigest, Source: source})
			if !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("Ensure with wrong digest: err=%v, want ErrDigestMismatch", err)
			}
			h, _ := ParseDigest(otherDigest)
			if _, err := os.Stat(s.EntryPath(h)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("entry file exists after mismatch: %v", err)
			}
			if _, err := os.Stat(filepath.Join(s.Root(), "tmp", h+".partial")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("partial kept after mismatch: %v", err)
			}
			if len(s.Entries()) != 0 {
				t.Fatalf("entries after mismatch: %v", s.Entries())
			}
		})
	}
}

// TestEnsureResumesHTTPRange interrupts the first HTTP response and checks that the second attempt asks
// only for the missing bytes and yields a verified entry.
func TestEnsureResumesHTTPRange(t *testing.T) {
	data, digest := content(3<<20, 3)
	const cut = 1<<20 + 12345
	var mu sync.Mutex
	var ranges []string
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		ranges = append(ranges, r.Header.Get("Range"))
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			w.WriteHeader(http.StatusOK)
			w.Write(data[:cut])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drop the connection mid-body
		}
		http.ServeContent(w, r, "m", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := NewSource(srv.URL+"/m", SourceOptions{Egress: egress.AllowLoopback()})
	if _, err := s.Ensure(context.Background(), Request{Digest: digest, Source: src}); err == nil {
		t.Fatal("first Ensure succeeded despite the dropped connection")
	}
	e, err := s.Ensure(context.Background(), Request{Digest: digest, Source: src})
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ranges) != 2 || ranges[0] != "" || ranges[1] != fmt.Sprintf("bytes=%d-", cut) {
		t.Fatalf("Range headers = %q, want [\"\" \"bytes=%d-\"]", ranges, cut)
	}
	got, err := os.ReadFile(e.Path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("entry content differs (err=%v)", err)
	}
}

// TestEnsureRestartsWhenRangeIgnored checks that a server answering 200 to a Range request restarts the
// download cleanly instead of appending the whole body to the partial file.
func TestEnsureRestartsWhenRangeIgnored(t *testing.T) {
	data, digest := content(200_000, 4)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			w.Write(data[:50_000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		w.Write(data) // ignores Range
	}))
	defer srv.Close()
	s, _ := Open(t.TempDir(), Options{})
	src, _ := NewSource(srv.URL, SourceOptions{Egress: egress.AllowLoopback()})
	_, _ = s.Ensure(context.Background(), Request{Digest: digest, Source: src})
	e, err := s.Ensure(context.Background(), Request{Digest: digest, Source: src})
	if err != nil {
		t.Fatalf("Ensure after ignored Range: %v", err)
	}
	if e.Size != int64(len(data)) {
		t.Fatalf("size %d, want %d", e.Size, len(data))
	}
}

// TestEnsureResumedMismatchRestarts corrupts the kept partial file; the resumed attempt fails
// verification and the store restarts from scratch, so the result is still correct.
func TestEnsureResumedMismatchRestarts(t *testing.T) {
	data, digest := content(100_000, 5)
	s, _ := Open(t.TempDir(), Options{})
	h, _ := ParseDigest(digest)
	bad := bytes.Repeat([]byte{0xff}, 30_000)
	if err := os.WriteFile(filepath.Join(s.Root(), "tmp", h+".partial"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	src := &bytesSource{data: data, failAfter: -1}
	e, err := s.Ensure(context.Background(), Request{Digest: digest, Source: src})
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if want := []int64{30_000, 0}; fmt.Sprint(src.offsets) != fmt.Sprint(want) {
		t.Fatalf("source offsets %v, want %v", src.offsets, want)
	}
	if err := s.Verify(e.Hex); err != nil {
		t.Fatal(err)
	}
}

func TestPartialNeverVisible(t *testing.T) {
	data, digest := content(500_000, 6)
	dir := t.TempDir()
	s, _ := Open(dir, Options{})
	src := &bytesSource{data: data, failAfter: 200_000}
	if _, err := s.Ensure(context.Background(), Request{Digest: digest, Source: src}); err == nil {
		t.Fatal("Ensure succeeded despite the failing source")
	}
	if len(s.Entries()) != 0 {
		t.Fatalf("failed fetch produced entries %v", s.Entries())
	}
	// A fresh Store on the same directory (a restarted agent) must not index the partial either.
	s2, _ := Open(dir, Options{})
	if len(s2.Entries()) != 0 {
		t.Fatalf("restarted store indexes %v", s2.Entries())
	}
	if _, err := s2.Ensure(context.Background(), Request{Digest: digest, Source: src}); err != nil {
		t.Fatal(err)
	}
	if src.offsets[len(src.offsets)-1] != 200_000 {
		t.Fatalf("restart resumed at %v, want 200000", src.offsets)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	s, _ := Open(t.TempDir(), Options{MaxConcurrent: 2})
	var cur, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		data, digest := content(10_000, uint64(100+i))
		src := &gateSource{data: data, cur: &cur, peak: &peak}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ensure(context.Background(), Request{Digest: digest, Source: src}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak concurrent fetches %d, want 2", p)
	}
	if n := len(s.Entries()); n != 6 {
		t.Fatalf("%d entries, want 6", n)
	}
}

// gateSource holds each open for a moment so that concurrent fetches overlap.
type gateSource struct {
	data      []byte
	cur, peak *atomic.Int32
}

func (g *gateSource) Open(context.Context, int64) (io.ReadCloser, int64, int64, error) {
	c := g.cur.Add(1)
	for {
		p := g.peak.Load()
		if c <= p || g.peak.CompareAndSwap(p, c) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	return closeFunc{Reader: bytes.NewReader(g.data), f: func() { g.cur.Add(-1) }}, 0, int64(len(g.data)), nil
}
func (g *gateSource) String() string { return "gate" }

type closeFunc struct {
	io.Reader
	f func()
}

func (c closeFunc) Close() error { c.f(); return nil }

func TestOpenRemovesStalePartials(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		age      time.Duration
		wantKept bool
	}{
		{"fresh.partial", time.Hour, true},
		{"old.partial", 8 * 24 * time.Hour, false},
		{"old.lock", 8 * 24 * time.Hour, true}, // not a partial
	}
	for _, tt := range tests {
		p := filepath.Join(dir, "tmp", tt.name)
		os.WriteFile(p, []byte("x"), 0o644)
		old := time.Now().Add(-tt.age)
		os.Chtimes(p, old, old)
	}
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		_, err := os.Stat(filepath.Join(dir, "tmp", tt.name))
		if kept := err == nil; kept != tt.wantKept {
			t.Errorf("%s kept=%v, want %v", tt.name, kept, tt.wantKept)
		}
	}
}
