package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeImages writes a fake image directory: a big "pages" file and a few
// small metadata files.
func writeImages(t *testing.T, dir string, pages []byte) {
	t.Helper()
	files := map[string][]byte{
		"pages-1.img":     pages,
		"core-1.img":      []byte("core"),
		"sub/inventory":   []byte("inventory"),
		"empty.img":       nil,
		"pagemap-1.img":   bytes.Repeat([]byte{7}, 1000),
		"fdinfo-2.img":    randBytes(5000, 9),
		"stats-dump":      []byte("stats"),
		"tmpfs-dev-1.img": make([]byte, 3<<20),
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func sameTree(t *testing.T, a, b string) {
	t.Helper()
	err := filepath.WalkDir(a, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			t.Errorf("restored tree lacks %s: %v", rel, err)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs after round trip", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newDirStore(t *testing.T, comp Compression) (*Store, *Dir) {
	t.Helper()
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(d, Options{Compression: comp, Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s, d
}

func TestRoundTripDedupAndProgress(t *testing.T) {
	for _, comp := range []Compression{"", CompressionZstd} {
		t.Run("compression="+string(comp), func(t *testing.T) {
			ctx := context.Background()
			s, _ := newDirStore(t, comp)
			src := t.TempDir()
			pages := randBytes(24<<20, 3)
			writeImages(t, src, pages)
			var last Progress
			calls := 0
			m, err := s.Put(ctx, key("agent-a"), "ck1", src, map[string]string{"pod": "p"}, func(p Progress) {
				if p.Done < last.Done {
					t.Errorf("progress went backwards: %d after %d", p.Done, last.Done)
				}
				last, calls = p, calls+1
			})
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			wantComp := CompressionNone
			if comp == CompressionZstd {
				wantComp = CompressionZstd
			}
			if m.Compression != wantComp {
				t.Errorf("compression %q, want %q (local dir default is none)", m.Compression, wantComp)
			}
			if calls == 0 || last.Done != m.TotalBytes || last.Total != m.TotalBytes {
				t.Errorf("progress: %d calls, last %+v, total %d", calls, last, m.TotalBytes)
			}
			for _, f := range m.Files {
				if len(f.SHA256) != 64 {
					t.Errorf("file %s has no sha256", f.Path)
				}
			}
			dst := t.TempDir()
			if _, err := s.Get(ctx, key("agent-a"), "ck1", dst, nil); err != nil {
				t.Fatalf("Get: %v", err)
			}
			sameTree(t, src, dst)

			// Unchanged re-checkpoint stores nothing new.
			m2, err := s.Put(ctx, key("agent-a"), "ck2", src, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if m2.NewBytes != 0 {
				t.Errorf("unchanged re-checkpoint stored %d new bytes, want 0", m2.NewBytes)
			}
			// A 4 KiB page changed in the middle adds about one chunk.
			copy(pages[10<<20:], randBytes(4096, 4))
			writeImages(t, src, pages)
			m3, err := s.Put(ctx, key("agent-a"), "ck3", src, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if m3.NewBytes == 0 || m3.NewBytes > 2*MaxChunk {
				t.Errorf("one changed page stored %d new bytes, want (0, %d]", m3.NewBytes, 2*MaxChunk)
			}
			latest, err := s.Latest(ctx, key("agent-a"))
			if err != nil || latest.ID != "ck3" {
				t.Errorf("Latest = %v, %v; want ck3", latest, err)
			}
		})
	}
}

func TestCorruptChunkDetected(t *testing.T) {
	tests := []struct {
		name    string
		comp    Compression
		corrupt func(data []byte) []byte
	}{
		{"flipped byte", CompressionNone, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }},
		{"truncated", CompressionNone, func(b []byte) []byte { return b[:len(b)-1] }},
		{"flipped byte zstd", CompressionZstd, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, d := newDirStore(t, tc.comp)
			src := t.TempDir()
			writeImages(t, src, randBytes(8<<20, 5))
			m, err := s.Put(ctx, key("agent-b"), "ck", src, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var big File
			for _, f := range m.Files {
				if f.Path == "pages-1.img" {
					big = f
				}
			}
			victim := filepath.Join(d.Root, mustChunkKey(t, testNS, big.Chunks[1].SHA256, m.Compression))
			data, err := os.ReadFile(victim)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(victim, tc.corrupt(data), 0o644); err != nil {
				t.Fatal(err)
			}
			dst := t.TempDir()
			_, err = s.Get(ctx, key("agent-b"), "ck", dst, nil)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get of corrupt chunk: err = %v, want ErrCorrupt", err)
			}
			t.Logf("error: %v", err)
			left, _ := os.ReadDir(dst)
			for _, e := range left {
				if !e.IsDir() {
					t.Errorf("Get left file %s behind after corruption", e.Name())
				}
			}
		})
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	old := ChunkGrace
	ChunkGrace = 0
	t.Cleanup(func() { ChunkGrace = old })
	base := time.Now()
	tests := []struct {
		name    string
		r       Retention
		ages    []time.Duration // creation age of ck0..ckN, oldest first
		deleted []string
	}{
		{"keep last 2", Retention{KeepLast: 2}, []time.Duration{4 * time.Hour, 3 * time.Hour, 2 * time.Hour, time.Hour}, []string{"ck0", "ck1"}},
		{"max age", Retention{MaxAge: 150 * time.Minute}, []time.Duration{4 * time.Hour, 3 * time.Hour, 2 * time.Hour, time.Hour}, []string{"ck0", "ck1"}},
		{"newest always kept", Retention{MaxAge: time.Minute}, []time.Duration{2 * time.Hour, time.Hour}, []string{"ck0"}},
		{"no policy", Retention{}, []time.Duration{2 * time.Hour, time.Hour}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, d := newDirStore(t, CompressionNone)
			ownChunks := map[string]int{}
			for i, age := range tc.ages {
				src := t.TempDir()
				// Each checkpoint has one unique file and shares "shared".
				_ = os.WriteFile(filepath.Join(src, "shared"), randBytes(1<<20, 77), 0o600)
				_ = os.WriteFile(filepath.Join(src, "own"), randBytes(1<<20, uint64(i+100)), 0o600)
				id := "ck" + string(rune('0'+i))
				m, err := s.Put(ctx, key("agent-c"), id, src, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range m.Files {
					if f.Path == "own" {
						ownChunks[id] = len(f.Chunks)
					}
				}
				m.Created = base.Add(-age)
				if err := rewriteManifest(ctx, s, m); err != nil {
					t.Fatal(err)
				}
			}
			res, err := s.Prune(ctx, key("agent-c"), tc.r, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Deleted) != len(tc.deleted) {
				t.Fatalf("deleted %v, want %v", res.Deleted, tc.deleted)
			}
			for i := range tc.deleted {
				if res.Deleted[i] != tc.deleted[i] {
					t.Errorf("deleted %v, want %v", res.Deleted, tc.deleted)
				}
			}
			want := 0
			for _, id := range tc.deleted {
				want += ownChunks[id]
			}
			if res.Chunks != want {
				t.Errorf("gc removed %d chunks, want %d (the unique ones of deleted checkpoints)", res.Chunks, want)
			}
			ms, _ := s.List(ctx, key("agent-c"))
			for _, m := range ms {
				if _, err := s.Get(ctx, key("agent-c"), m.ID, t.TempDir(), nil); err != nil {
					t.Errorf("kept checkpoint %s no longer restores: %v", m.ID, err)
				}
			}
			_ = d
		})
	}
}

// TestVerifyFilesCatchesManifestMismatch: with VerifyFiles, a manifest whose
// file digest disagrees with its chunks is rejected.
func TestVerifyFilesCatchesManifestMismatch(t *testing.T) {
	tests := []struct {
		verify  bool
		wantErr bool
	}{{true, true}, {false, false}}
	for _, tc := range tests {
		t.Run(fmt.Sprint("verify=", tc.verify), func(t *testing.T) {
			ctx := context.Background()
			d, _ := NewDir(t.TempDir())
			s, _ := New(d, Options{VerifyFiles: tc.verify, Signer: testSigner(t)})
			src := t.TempDir()
			writeImages(t, src, randBytes(2<<20, 8))
			m, err := s.Put(ctx, key("agent-v"), "ck", src, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			m.Files[0].SHA256 = strings.Repeat("0", 64)
			if err := rewriteManifest(ctx, s, m); err != nil {
				t.Fatal(err)
			}
			_, err = s.Get(ctx, key("agent-v"), "ck", t.TempDir(), nil)
			if tc.wantErr != errors.Is(err, ErrCorrupt) {
				t.Errorf("Get err = %v, want corrupt=%v", err, tc.wantErr)
			}
		})
	}
}
