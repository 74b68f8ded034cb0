// Package workspace archives a container's workspace directory (an AgentSession's /workspace
// emptyDir) next to its CRIU images, and extracts such an archive into a new pod's workspace
// before the restore (docs/checkpoint.md, "Workspace").
//
// The workspace is written by an untrusted agent. Archive never follows a symbolic link (links
// are stored as links, so a link to /etc/shadow stores the link, not the file) and reads through
// an os.Root, so nothing outside the directory is read. Extract writes through an os.Root, so no
// entry name ("../x", "/etc/x") and no link the archive created earlier can place a file outside
// the target directory; entries other than directories, regular files and symbolic links are
// refused, set-uid and set-gid bits are dropped, and the bytes written are bounded by a limit.
package workspace

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
)

// ErrTooLarge is returned when a workspace's files add up to more than the limit.
var ErrTooLarge = errors.New("workspace over its size limit")

// ErrUnsafeEntry is returned by Extract for an entry it refuses (a name outside the target, a
// type other than directory, file or link, a write through a link out of the target).
var ErrUnsafeEntry = errors.New("unsafe workspace archive entry")

// MaxEntries bounds the entries of one archive (files, directories and links).
const MaxEntries = 1 << 20

// Stats describes an archive.
type Stats struct {
	// Bytes is the sum of the regular files' sizes; Entries counts files, directories and links.
	Bytes   int64
	Entries int
	// Skipped counts entries Archive left out (sockets, FIFOs, devices).
	Skipped int
}

// Size is the sum of the sizes of the regular files under dir, read without following links.
func Size(dir string) (int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	defer root.Close()
	var n int64
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of workspace %s: %w", dir, err)
	}
	return n, nil
}

// Archive writes the files of dir as a zstd-compressed tar to w. It fails with ErrTooLarge when
// the regular files add up to more than limit bytes (limit <= 0: no limit).
func Archive(dir string, w io.Writer, limit int64) (Stats, error) {
	var st Stats
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	defer root.Close()
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return st, fmt.Errorf("zstd: %w", err)
	}
	tw := tar.NewWriter(zw)
	if err := archiveDir(root, ".", tw, limit, &st); err != nil {
		zw.Close()
		return st, err
	}
	if err := tw.Close(); err != nil {
		zw.Close()
		return st, fmt.Errorf("tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return st, fmt.Errorf("zstd: %w", err)
	}
	return st, nil
}

// archiveDir writes the entries of directory name (relative to root), in name order.
func archiveDir(root *os.Root, name string, tw *tar.Writer, limit int64, st *Stats) error {
	d, err := root.Open(name)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("read dir %s: %w", name, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		p := path.Join(name, e.Name())
		fi, err := root.Lstat(p)
		if err != nil {
			return fmt.Errorf("lstat %s: %w", p, err)
		}
		if err := archiveEntry(root, p, fi, tw, limit, st); err != nil {
			return err
		}
	}
	return nil
}

func archiveEntry(root *os.Root, p string, fi fs.FileInfo, tw *tar.Writer, limit int64, st *Stats) error {
	var link string
	switch {
	case fi.Mode().IsDir(), fi.Mode().IsRegular():
	case fi.Mode()&fs.ModeSymlink != 0:
		var err error
		if link, err = root.Readlink(p); err != nil {
			return fmt.Errorf("readlink %s: %w", p, err)
		}
	default:
		st.Skipped++ // sockets, FIFOs, devices: nothing a restore can recreate safely
		return nil
	}
	if st.Entries++; st.Entries > MaxEntries {
		return fmt.Errorf("%w: more than %d entries", ErrTooLarge, MaxEntries)
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("header of %s: %w", p, err)
	}
	hdr.Name, hdr.Uname, hdr.Gname = p, "", ""
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if fi.Mode().IsRegular() {
		if st.Bytes += fi.Size(); limit > 0 && st.Bytes > limit {
			return fmt.Errorf("%w: more than %d bytes of files (at %s)", ErrTooLarge, limit, p)
		}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("tar header %s: %w", p, err)
	}
	switch {
	case fi.IsDir():
		return archiveDir(root, p, tw, limit, st)
	case fi.Mode().IsRegular():
		return copyFile(root, p, fi, tw)
	}
	return nil
}

// copyFile writes exactly the size Lstat saw; a file replaced by something else since is refused.
func copyFile(root *os.Root, p string, fi fs.FileInfo, tw *tar.Writer) error {
	f, err := root.OpenFile(p, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer f.Close()
	now, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if !now.Mode().IsRegular() || !os.SameFile(fi, now) {
		return fmt.Errorf("%s changed while it was archived", p)
	}
	if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
		return fmt.Errorf("copy %s (%d bytes): %w", p, fi.Size(), err)
	}
	return nil
}

// Extract writes the archive r (Archive's format) into dir, which should be empty, without
// writing anything outside it. It fails with ErrTooLarge past limit bytes of files (limit <= 0:
// no limit) and with ErrUnsafeEntry for an entry it refuses; ownership is kept when the caller
// may set it (root).
func Extract(r io.Reader, dir string, limit int64) (Stats, error) {
	var st Stats
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	defer root.Close()
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return st, fmt.Errorf("zstd: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	chown := os.Geteuid() == 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("read workspace archive: %w", err)
		}
		if st.Entries++; st.Entries > MaxEntries {
			return st, fmt.Errorf("%w: more than %d entries", ErrTooLarge, MaxEntries)
		}
		if err := extractEntry(root, tr, hdr, limit, chown, &st); err != nil {
			return st, err
		}
	}
}

func extractEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, limit int64, chown bool, st *Stats) error {
	name := path.Clean(hdr.Name)
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("%w: name %q is not a path inside the workspace", ErrUnsafeEntry, hdr.Name)
	}
	perm := fs.FileMode(hdr.Mode) & (fs.ModePerm | fs.ModeSticky) // no set-uid or set-gid
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, 0o700); err != nil {
			return unsafe(name, err)
		}
		if err := root.Chmod(name, perm|fs.ModeDir); err != nil {
			return unsafe(name, err)
		}
	case tar.TypeReg:
		if hdr.Size < 0 {
			return fmt.Errorf("%w: %s has size %d", ErrUnsafeEntry, name, hdr.Size)
		}
		if st.Bytes += hdr.Size; limit > 0 && st.Bytes > limit {
			return fmt.Errorf("%w: more than %d bytes of files (at %s)", ErrTooLarge, limit, name)
		}
		if err := writeFile(root, name, tr, hdr.Size, perm); err != nil {
			return err
		}
		if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
			return unsafe(name, err)
		}
	case tar.TypeSymlink:
		// The link is created, never followed here; a later entry written through it must stay
		// inside the root (os.Root refuses it otherwise).
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return unsafe(name, err)
		}
	default:
		return fmt.Errorf("%w: %s has type %q (only directories, regular files and symbolic links)", ErrUnsafeEntry, name, hdr.Typeflag)
	}
	if chown {
		if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return unsafe(name, err)
		}
	}
	return nil
}

// writeFile creates name (it must not exist: O_EXCL never writes through an existing link) and
// copies exactly size bytes into it.
func writeFile(root *os.Root, name string, r io.Reader, size int64, perm fs.FileMode) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		return unsafe(name, err)
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	return nil
}

func unsafe(name string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnsafeEntry, name, err)
}

// noFollow opens a file only when the name itself is not a symbolic link.
const noFollow = syscall.O_NOFOLLOW
