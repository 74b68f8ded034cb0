package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestChunksOfOtherBoundariesStayReadable stores a checkpoint whose chunks
// were cut elsewhere than the chunker cuts today (as with the 15/11-bit
// masks of earlier releases, about 288 KiB each) and reads it back: reads
// follow the manifest's chunk list, so changing the chunker never strands
// stored checkpoints.
func TestChunksOfOtherBoundariesStayReadable(t *testing.T) {
	for _, comp := range []Compression{CompressionNone, CompressionZstd} {
		t.Run(string(comp), func(t *testing.T) {
			ctx := context.Background()
			d, err := NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(d, Options{Compression: comp, Signer: testSigner(t)})
			if err != nil {
				t.Fatal(err)
			}
			data := randBytes(3<<20+777, 9)
			whole := sha256.Sum256(data)
			f := File{Path: "pages-1.img", Mode: 0o600, Size: int64(len(data)), SHA256: hex.EncodeToString(whole[:])}
			for off := 0; off < len(data); off += 288 << 10 {
				chunk := data[off:min(off+288<<10, len(data))]
				sum := sha256.Sum256(chunk)
				ref := ChunkRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(chunk))}
				body := chunk
				if comp == CompressionZstd {
					body = s.enc.EncodeAll(chunk, nil)
				}
				if err := s.b.Put(ctx, mustChunkKey(t, testNS, ref.SHA256, comp), bytes.NewReader(body), int64(len(body))); err != nil {
					t.Fatal(err)
				}
				f.Chunks = append(f.Chunks, ref)
			}
			m := &Manifest{Version: ManifestVersion, Key: key("a"), ID: "old", Created: time.Now().UTC(), Compression: comp, Files: []File{f}, TotalBytes: f.Size}
			if err := rewriteManifest(ctx, s, m); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "images")
			if _, err := s.Get(ctx, key("a"), "old", dst, nil); err != nil {
				t.Fatalf("Get of a checkpoint with %d chunks of 288 KiB: %v", len(f.Chunks), err)
			}
			got, err := os.ReadFile(filepath.Join(dst, "pages-1.img"))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the %d stored", len(got), err, len(data))
			}
		})
	}
}
