package workspace

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrip: files, nested and empty directories, modes, times, owners and links inside the
// workspace come back; a link out of the workspace is kept as a link and what it points at is
// not archived; set-uid is dropped; a FIFO is skipped.
func TestRoundTrip(t *testing.T) {
	src, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "secret"), "host secret", 0o600)
	write(t, filepath.Join(src, "notes.txt"), "remember 42\n", 0o644)
	write(t, filepath.Join(src, "deep/er/state.json"), `{"turns":3}`, 0o600)
	write(t, filepath.Join(src, "empty"), "", 0o640)
	write(t, filepath.Join(src, "tool"), "#!/bin/sh\n", 0o4755)
	if err := os.MkdirAll(filepath.Join(src, "emptydir"), 0o750); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink("deep/er/state.json", filepath.Join(src, "inside-link")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "outside-link")))
	must(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(src, "notes.txt"), mtime, mtime))
	if os.Geteuid() == 0 {
		must(t, os.Lchown(filepath.Join(src, "notes.txt"), 1234, 5678))
	}

	size, err := Size(src)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := Archive(src, &buf, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len("remember 42\n") + len(`{"turns":3}`) + len("#!/bin/sh\n"))
	if st.Bytes != want || size != want || st.Skipped != 1 || st.Entries != 9 {
		t.Fatalf("stats %+v, size %d; want %d bytes, 9 entries, 1 skipped", st, size, want)
	}
	if bytes.Contains(buf.Bytes(), []byte("host secret")) {
		t.Fatal("archive holds the file a link points at outside the workspace")
	}
	dst := t.TempDir()
	got, err := Extract(bytes.NewReader(buf.Bytes()), dst, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bytes != want || got.Entries != 9 {
		t.Fatalf("extract stats %+v", got)
	}
	for name, content := range map[string]string{"notes.txt": "remember 42\n", "deep/er/state.json": `{"turns":3}`, "empty": "", "inside-link": `{"turns":3}`} {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(b) != content {
			t.Errorf("%s: %q %v, want %q", name, b, err, content)
		}
	}
	for name, mode := range map[string]os.FileMode{"notes.txt": 0o644, "deep/er/state.json": 0o600, "empty": 0o640, "tool": 0o755, "emptydir": os.ModeDir | 0o750} {
		if fi, err := os.Lstat(filepath.Join(dst, name)); err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v %v, want %v", name, fi.Mode(), err, mode)
		}
	}
	if l, err := os.Readlink(filepath.Join(dst, "outside-link")); err != nil || l != filepath.Join(outside, "secret") {
		t.Errorf("outside-link: %q %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !os.IsNotExist(err) {
		t.Errorf("fifo extracted: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dst, "notes.txt"))
	if err != nil || !fi.ModTime().Equal(mtime) {
		t.Errorf("notes.txt mtime %v %v, want %v", fi.ModTime(), err, mtime)
	}
	if os.Geteuid() == 0 {
		if s := fi.Sys().(*syscall.Stat_t); s.Uid != 1234 || s.Gid != 5678 {
			t.Errorf("notes.txt owner %d:%d, want 1234:5678", s.Uid, s.Gid)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestArchiveOverLimit: a workspace over the limit fails with ErrTooLarge naming the limit, and
// its files are untouched.
func TestArchiveOverLimit(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "a"), strings.Repeat("x", 600), 0o644)
	write(t, filepath.Join(src, "b"), strings.Repeat("y", 600), 0o644)
	_, err := Archive(src, &bytes.Buffer{}, 1000)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1000 bytes") {
		t.Fatalf("err %v, want ErrTooLarge naming 1000 bytes", err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "b")); len(b) != 600 {
		t.Fatalf("workspace changed by a refused archive: %d bytes", len(b))
	}
	if _, err := Archive(src, &bytes.Buffer{}, 1200); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
}

type entry struct {
	hdr  tar.Header
	body string
}

func crafted(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	must(t, err)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, tw.WriteHeader(&h))
		if e.body != "" {
			_, err := tw.Write([]byte(e.body))
			must(t, err)
		}
	}
	must(t, tw.Close())
	must(t, zw.Close())
	return buf.Bytes()
}

func reg(name, body string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg}, body: body}
}

func link(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}}
}

// TestExtractRefusesEscapes: crafted archives (an untrusted agent wrote the workspace) never put
// or change a file outside the target directory: names with "..", absolute names, writes
// through a link created by the archive itself (absolute or relative), a regular file over such a
// link, hard links, devices, and more bytes than the limit.
func TestExtractRefusesEscapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries func(outside string) []entry
		want    error
	}{
		{"dot-dot name", func(string) []entry { return []entry{reg("../escaped", "x")} }, ErrUnsafeEntry},
		{"dot-dot inside a name", func(string) []entry { return []entry{reg("a/../../escaped", "x")} }, ErrUnsafeEntry},
		{"absolute name", func(o string) []entry { return []entry{reg(filepath.Join(o, "escaped"), "x")} }, ErrUnsafeEntry},
		{"write through an absolute link", func(o string) []entry {
			return []entry{link("evil", o), reg("evil/escaped", "x")}
		}, ErrUnsafeEntry},
		{"write through a relative link", func(o string) []entry {
			rel, _ := filepath.Rel("/", o)
			return []entry{link("evil", strings.Repeat("../", 12)+rel), reg("evil/escaped", "x")}
		}, ErrUnsafeEntry},
		{"directory through a link", func(o string) []entry {
			return []entry{link("evil", o), {hdr: tar.Header{Name: "evil/sub/", Typeflag: tar.TypeDir, Mode: 0o755}}}
		}, ErrUnsafeEntry},
		{"directory entry over a link to an outside directory", func(o string) []entry {
			return []entry{link("evil", o), {hdr: tar.Header{Name: "evil/", Typeflag: tar.TypeDir, Mode: 0o777}}}
		}, ErrUnsafeEntry},
		{"file over a link to an outside file", func(o string) []entry {
			return []entry{link("victim", filepath.Join(o, "victim")), reg("victim", "overwritten")}
		}, ErrUnsafeEntry},
		{"hard link to an outside file", func(o string) []entry {
			return []entry{{hdr: tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: filepath.Join(o, "victim")}}}
		}, ErrUnsafeEntry},
		{"character device", func(string) []entry {
			return []entry{{hdr: tar.Header{Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1}}}
		}, ErrUnsafeEntry},
		{"over the limit", func(string) []entry {
			return []entry{reg("a", strings.Repeat("x", 800)), reg("b", strings.Repeat("x", 800))}
		}, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dst, outside := filepath.Join(base, "dst"), filepath.Join(base, "outside")
			must(t, os.MkdirAll(dst, 0o755))
			write(t, filepath.Join(outside, "victim"), "victim data", 0o644)
			_, err := Extract(bytes.NewReader(crafted(t, tc.entries(outside)...)), dst, 1000)
			t.Logf("refused: %v", err)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("outside dir mode %v %v, want 0755", fi.Mode(), err)
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 {
				t.Errorf("outside dir holds %d entries, want only victim", len(ents))
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "victim data" {
				t.Errorf("outside file changed: %q", b)
			}
			if _, err := os.Lstat(filepath.Join(base, "escaped")); !os.IsNotExist(err) {
				t.Errorf("file written next to the target: %v", err)
			}
		})
	}
}

// TestExtractDropsSetuid: a crafted set-uid, set-gid file is written without those bits.
func TestExtractDropsSetuid(t *testing.T) {
	dst := t.TempDir()
	e := reg("suid", "x")
	e.hdr.Mode = 0o6755
	if _, err := Extract(bytes.NewReader(crafted(t, e)), dst, 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "suid")); err != nil || fi.Mode() != 0o755 {
		t.Fatalf("mode %v %v, want 0755", fi.Mode(), err)
	}
}
