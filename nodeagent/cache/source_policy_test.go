package cache

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// TestFileSourceRoots: file sources are read only below an admin-listed root; "..", symbolic
// links out of the root and non-regular files are refused, and no roots refuses all.
func TestFileSourceRoots(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "weights")
	outside := filepath.Join(dir, "secret")
	for _, d := range []string{root, filepath.Join(root, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "sub", "m.bin"), []byte("weights"), 0o644)
	os.WriteFile(outside, []byte("token"), 0o600)
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/m.bin", filepath.Join(root, "inner")); err != nil { // relative: os.Root refuses absolute links
		t.Fatal(err)
	}
	roots := []string{root}
	for _, tc := range []struct {
		name, uri string
		roots     []string
		newErr    string // from NewSource
		openErr   string // from Open
	}{
		{"below root", "file://" + root + "/sub/m.bin", roots, "", ""},
		{"bare path below root", root + "/sub/m.bin", roots, "", ""},
		{"symlink within root", "file://" + root + "/inner", roots, "", ""},
		{"no roots", "file:///etc/hostname", nil, "file sources are disabled", ""},
		{"outside root", "file:///etc/hostname", roots, "not below a directory of nodeagent.fileSourceRoots", ""},
		{"dot-dot out of root", "file://" + root + "/../secret", roots, "not below", ""},
		{"the root itself", "file://" + root, roots, "not below", ""},
		{"prefix sibling", "file://" + root + "x/m.bin", roots, "not below", ""},
		{"symlink out of root", "file://" + root + "/link", roots, "", "escapes"},
		{"directory", "file://" + root + "/sub", roots, "", "not a regular file"},
		{"file URI with a host", "file://evil/" + root + "/sub/m.bin", roots, "names no host", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := NewSource(tc.uri, SourceOptions{FileRoots: tc.roots})
			if tc.newErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.newErr) || !strings.Contains(err.Error(), "spec.source.uri") {
					t.Fatalf("NewSource err %v, want %q naming spec.source.uri", err, tc.newErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rc, _, _, err := src.Open(context.Background(), 0)
			if tc.openErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.openErr) {
					t.Fatalf("Open err %v, want %q", err, tc.openErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != "weights" {
				t.Fatalf("read %q", b)
			}
		})
	}
}

// TestSourceEgress: http(s) and s3 sources reach only addresses the egress policy admits.
func TestSourceEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x") }))
	defer srv.Close()
	for _, tc := range []struct {
		name, uri string
		opts      SourceOptions
		wantErr   string
	}{
		{"metadata server literal", "http://169.254.169.254/latest/meta-data/", SourceOptions{}, "link-local"},
		{"loopback denied at dial", srv.URL + "/m", SourceOptions{}, "loopback"},
		{"loopback admitted", srv.URL + "/m", SourceOptions{Egress: egress.AllowLoopback()}, ""},
		{"s3 endpoint private", "s3://b/k", SourceOptions{S3Endpoint: "http://10.0.0.1:9000"}, "private"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := NewSource(tc.uri, tc.opts)
			if err == nil {
				var rc io.ReadCloser
				rc, _, _, err = src.Open(context.Background(), 0)
				if err == nil {
					rc.Close()
				}
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, egress.ErrDenied) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want egress denial (%s)", err, tc.wantErr)
			}
		})
	}
}

// TestDigestMismatchHidesHash: the error of a mismatch (what Model status shows) never carries
// the content's hash.
func TestDigestMismatchHidesHash(t *testing.T) {
	data, actual := content(4096, 9)
	_, other := content(10, 10)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), data, 0o644)
	s, err := Open(filepath.Join(dir, "cache"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource("file://"+filepath.Join(dir, "f"), SourceOptions{FileRoots: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Ensure(context.Background(), Request{Digest: other, Source: src})
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err %v, want ErrDigestMismatch", err)
	}
	if hex := strings.TrimPrefix(actual, DigestPrefix); strings.Contains(err.Error(), hex) || strings.Contains(err.Error(), hex[:12]) {
		t.Fatalf("error %q echoes the content's hash", err)
	}
	if !strings.Contains(err.Error(), "does not match spec.digest") {
		t.Fatalf("error %q does not say the content does not match spec.digest", err)
	}
}
