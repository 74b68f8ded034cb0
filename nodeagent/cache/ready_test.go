package cache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestExposeLinksReadyEntries: a verified entry is linked under ready/<hex>/<name> with its content,
// idempotently; names that are not file names and absent entries are refused; removing the entry
// removes its links and keeps the directory (a pod may have it mounted).
func TestExposeLinksReadyEntries(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	data, digest := content(5000, 42)
	h := digest[len(DigestPrefix):]
	if err := s.Expose(h, "model.bin"); err == nil {
		t.Fatal("an absent entry was exposed")
	}
	if _, err := s.Ensure(context.Background(), Request{Digest: digest, Source: &bytesSource{data: data, failAfter: -1}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Expose(h, "model.bin"); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.ReadyDir(h), "model.bin")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("ready link: %v (content equal: %v)", err, bytes.Equal(b, data))
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b"} {
		if err := s.Expose(h, bad); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if err := s.Remove(h); err != nil {
		t.Fatal(err)
	}
	if s.Exposed(h, "model.bin") {
		t.Fatal("the ready link outlived its entry")
	}
	if fi, err := os.Stat(s.ReadyDir(h)); err != nil || !fi.IsDir() {
		t.Fatalf("the ready directory went: %v", err)
	}
}
