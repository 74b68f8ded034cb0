package cache

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

const (
	minioUser = "nn-test-user"
	minioPass = "nn-test-password-123"
)

// minioBinary finds the MinIO server built by hack/test-deps.d/10-minio.sh, or skips the test.
func minioBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NEURONETES_MINIO"); p != "" {
		return p
	}
	p, err := filepath.Abs("../../.local/bin/minio")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		testreq.Tool(t, "minio", "server not built (%v): run hack/test-deps.d/10-minio.sh", err)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startMinio runs a MinIO server on 127.0.0.1 with a temp data dir and returns its endpoint
// ("127.0.0.1:port"). It is killed at cleanup.
func startMinio(t *testing.T) string {
	t.Helper()
	bin := minioBinary(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	console := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, t.TempDir())
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+minioUser, "MINIO_ROOT_PASSWORD="+minioPass, "MINIO_BROWSER=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("minio not ready: %v\n%s", err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rangeRecorder records the Range header of every S3 request.
type rangeRecorder struct {
	mu     sync.Mutex
	ranges []string
}

func (r *rangeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && !req.URL.Query().Has("location") { // skip bucket-location lookups
		r.mu.Lock()
		r.ranges = append(r.ranges, req.Header.Get("Range"))
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func TestS3SourceFetchAndResume(t *testing.T) {
	endpoint := startMinio(t)
	ctx := context.Background()
	mc, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(minioUser, minioPass, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.MakeBucket(ctx, "models", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	data, digest := content(2<<20+777, 11)
	if _, err := mc.PutObject(ctx, "models", "llama/model.bin", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	h, _ := ParseDigest(digest)
	const kept = 1<<20 + 5
	tests := []struct {
		name      string
		partial   []byte // left by an interrupted earlier attempt
		user      string
		wantRange []string
		wantErr   bool
	}{
		{name: "fresh", user: minioUser, wantRange: []string{""}},
		{name: "resume", partial: data[:kept], user: minioUser, wantRange: []string{fmt.Sprintf("bytes=%d-", kept)}},
		{name: "bad credentials", user: "nobody", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(t.TempDir(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tt.partial != nil {
				if err := os.WriteFile(filepath.Join(s.Root(), "tmp", h+".partial"), tt.partial, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rec := &rangeRecorder{}
			src, err := NewSource("s3://models/llama/model.bin", SourceOptions{Egress: egress.AllowLoopback(),
				S3Endpoint: "http://" + endpoint, S3AccessKey: tt.user, S3SecretKey: minioPass, S3Transport: rec,
			})
			if err != nil {
				t.Fatal(err)
			}
			e, err := s.Ensure(ctx, Request{Digest: digest, Source: src})
			if tt.wantErr {
				if err == nil {
					t.Fatal("Ensure succeeded with bad credentials")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(rec.ranges) != fmt.Sprint(tt.wantRange) {
				t.Fatalf("S3 GET ranges %q, want %q", rec.ranges, tt.wantRange)
			}
			if err := s.Verify(e.Hex); err != nil || e.Size != int64(len(data)) {
				t.Fatalf("entry %+v verify %v", e, err)
			}
		})
	}
}
