package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseMaps(t *testing.T) {
	maps := `55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1234 /usr/bin/agent
7f0000000000-7f0040000000 r--p 00000000 fd:01 99 /var/lib/models/llama 8b/model.safetensors
7f0040000000-7f0040001000 rw-s 00000000 fd:01 100 /var/lib/agent/shared.db
7f0040001000-7f0040002000 rw-p 00000000 00:00 0 
7f0040002000-7f0040003000 r--p 00000000 fd:01 101 /tmp/old.bin (deleted)
7ffd0000000-7ffd0021000 rw-p 00000000 00:00 0                          [stack]
7f0040003000-7f0040004000 rw-p 00000000 00:01 7 /memfd:jit (deleted)
malformed line
`
	got, err := parseMaps(strings.NewReader(maps))
	if err != nil {
		t.Fatal(err)
	}
	want := []mapsEntry{
		{addr: "55d0c0a00000-55d0c0a21000", private: true, path: "/usr/bin/agent"},
		{addr: "7f0000000000-7f0040000000", private: true, path: "/var/lib/models/llama 8b/model.safetensors"},
		{addr: "7f0040000000-7f0040001000", private: false, path: "/var/lib/agent/shared.db"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMaps:\n got %+v\nwant %+v", got, want)
	}
}

// TestScanMappedFindsPrivateMapping maps a file privately in this process and
// checks that the scan records it with its identity, and that fill hashes it.
func TestScanMappedFindsPrivateMapping(t *testing.T) {
	p := filepath.Join(t.TempDir(), "weights.bin")
	if err := os.WriteFile(p, []byte(strings.Repeat("w", 1<<16)), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, 1<<16, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	files, err := ScanMappedFiles(context.Background(), []int{os.Getpid(), 1 << 30}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var found *MappedFile
	for i := range files {
		if files[i].Path == p {
			found = &files[i]
		}
	}
	if found == nil {
		t.Fatalf("scan did not find %s in %+v", p, files)
	}
	if found.Identity.Size != 1<<16 || found.Identity.Ino == 0 {
		t.Errorf("identity %+v", found.Identity)
	}
	var d DigestCache
	one := []MappedFile{*found}
	if err := d.fill(one); err != nil {
		t.Fatal(err)
	}
	want, _ := hashFile(p)
	if one[0].SHA256 != want || len(want) != 64 {
		t.Errorf("sha256 %q, want %q", one[0].SHA256, want)
	}
}

func TestVerifyMapped(t *testing.T) {
	content := []byte(strings.Repeat("weights!", 4096))
	tests := []struct {
		name    string
		check   MappedCheck
		change  func(t *testing.T, p string)
		wantErr string // "" means success
	}{
		{name: "unchanged", change: func(*testing.T, string) {}},
		{name: "unchanged, digest check", check: MappedCheckDigest, change: func(*testing.T, string) {}},
		{name: "same content, new inode (other node's cache)", change: func(t *testing.T, p string) {
			replace(t, p, content)
		}},
		{name: "same size, different content", change: func(t *testing.T, p string) {
			b := append([]byte(nil), content...)
			b[100] ^= 1
			replace(t, p, b)
		}, wantErr: "sha256"},
		{name: "rewritten in place", change: func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("X"), 7); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "sha256"},
		{name: "rewritten, none check", check: MappedCheckNone, change: func(t *testing.T, p string) {
			replace(t, p, []byte("short"))
		}},
		{name: "size changed", change: func(t *testing.T, p string) {
			replace(t, p, content[:100])
		}, wantErr: "size 100"},
		{name: "missing", change: func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "no such file"},
		{name: "invalid check", check: "sometimes", change: func(*testing.T, string) {}, wantErr: "invalid MappedCheck"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "model.safetensors")
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
			id, err := identityOf(p)
			if err != nil {
				t.Fatal(err)
			}
			files := []MappedFile{{Path: p, Identity: id}}
			var d DigestCache
			if err := d.fill(files); err != nil {
				t.Fatal(err)
			}
			// Round trip through the record CRIU's images travel with.
			if err := writeMapped(dir, files); err != nil {
				t.Fatal(err)
			}
			files, err = readMapped(dir)
			if err != nil || len(files) != 1 {
				t.Fatalf("readMapped = %v, %v", files, err)
			}
			time.Sleep(2 * time.Millisecond) // a rewrite gets a later ctime
			tc.change(t, p)
			err = verifyMapped(files, tc.check, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("verifyMapped: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("verifyMapped error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr != "" && tc.check != "sometimes" && !errors.Is(err, ErrMappedFileChanged):
				t.Errorf("error %v does not wrap ErrMappedFileChanged", err)
			}
		})
	}
}

func TestReadMappedAbsent(t *testing.T) {
	files, err := readMapped(t.TempDir())
	if err != nil || files != nil {
		t.Errorf("readMapped of a checkpoint without a record = %v, %v; want nil, nil", files, err)
	}
}

// replace writes content to a new file and renames it over p (a new inode).
func replace(t *testing.T, p string, content []byte) {
	t.Helper()
	tmp := p + ".new"
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}
