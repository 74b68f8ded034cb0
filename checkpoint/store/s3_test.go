package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/internal/testreq"
)

// startMinio runs the real minio server built by hack/test-deps.d/10-minio.sh
// on a random loopback port, or skips.
func startMinio(t *testing.T) S3Config {
	t.Helper()
	bin, _ := filepath.Abs("../../.local/bin/minio")
	if p := os.Getenv("NN_MINIO"); p != "" {
		bin = p
	}
	if _, err := os.Stat(bin); err != nil {
		testreq.Tool(t, "minio", "server binary not found at %s (built by hack/test-deps.d/10-minio.sh): %v", bin, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", "127.0.0.1:0", t.TempDir())
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER=nntest", "MINIO_ROOT_PASSWORD=nntest-secret", "MINIO_BROWSER=off")
	log, _ := os.Create(filepath.Join(t.TempDir(), "minio.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	cfg := S3Config{Endpoint: addr, Bucket: "checkpoints", Prefix: "nn/", AccessKey: "nntest", SecretKey: "nntest-secret", Insecure: true}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := NewS3(ctx, cfg)
		cancel()
		if err == nil {
			return cfg
		}
		if time.Now().After(deadline) {
			t.Fatalf("minio at %s not ready: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestS3RoundTripCompressedDedupCorrupt(t *testing.T) {
	cfg := startMinio(t)
	ctx := context.Background()
	b, err := NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(b, Options{Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	// Half-compressible pages, like real memory.
	pages := append(randBytes(6<<20, 11), make([]byte, 6<<20)...)
	writeImages(t, src, pages)
	m, err := s.Put(ctx, key("agent-s3"), "ck1", src, nil, nil)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if m.Compression != CompressionZstd {
		t.Errorf("remote backend compression %q, want zstd", m.Compression)
	}
	if m.StoredBytes >= m.NewBytes {
		t.Errorf("zstd stored %d bytes for %d new bytes", m.StoredBytes, m.NewBytes)
	}
	var last Progress
	dst := t.TempDir()
	if _, err := s.Get(ctx, key("agent-s3"), "ck1", dst, func(p Progress) { last = p }); err != nil {
		t.Fatalf("Get: %v", err)
	}
	sameTree(t, src, dst)
	if last.Done != m.TotalBytes {
		t.Errorf("download progress ended at %d of %d", last.Done, m.TotalBytes)
	}
	m2, err := s.Put(ctx, key("agent-s3"), "ck2", src, nil, nil)
	if err != nil || m2.NewBytes != 0 {
		t.Errorf("re-checkpoint: new bytes %d, err %v; want 0, nil", m2.NewBytes, err)
	}
	// Overwrite one chunk object with garbage of the right shape.
	victim := mustChunkKey(t, testNS, m.Files[0].Chunks[0].SHA256, m.Compression)
	for _, f := range m.Files {
		if f.Path == "pages-1.img" {
			victim = mustChunkKey(t, testNS, f.Chunks[0].SHA256, m.Compression)
		}
	}
	junk := s.enc.EncodeAll([]byte("not the chunk"), nil)
	if err := b.Put(ctx, victim, bytesReader(junk), int64(len(junk))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, key("agent-s3"), "ck1", t.TempDir(), nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get with a replaced chunk: %v, want ErrCorrupt", err)
	}
	if _, err := b.Get(ctx, "chunks/none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
	}
	t.Log(fmt.Sprintf("s3: total %d new %d stored %d", m.TotalBytes, m.NewBytes, m.StoredBytes))
}
