package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkGet measures fetch+verify of a 256 MiB image from a local
// directory store (the restore path's first step).
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	root := b.TempDir()
	d, _ := NewDir(filepath.Join(root, "store"))
	s, _ := New(d, Options{Signer: testSigner(b)})
	src := filepath.Join(root, "src")
	_ = os.MkdirAll(src, 0o755)
	_ = os.WriteFile(filepath.Join(src, "pages-1.img"), randBytes(256<<20, 1), 0o600)
	if _, err := s.Put(ctx, key("bench"), "ck", src, nil, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(256 << 20)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(root, "dst")
		if _, err := s.Get(ctx, key("bench"), "ck", dst, nil); err != nil {
			b.Fatal(err)
		}
		_ = os.RemoveAll(dst)
	}
}
