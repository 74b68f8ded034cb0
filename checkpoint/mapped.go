package checkpoint

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"k8s.io/klog/v2"
)

// MappedFilesName is the file, stored next to CRIU's images, that records the
// files the checkpointed tree had mapped privately. CRIU leaves their clean
// pages out of the dump and maps the file again at restore, so a restore is
// only right if the file is still the one that was mapped.
const MappedFilesName = "neuronetes-mapped-files.json"

// ErrMappedFileChanged is wrapped by Restore when a file the checkpointed
// tree had mapped is missing or differs from the file at checkpoint time.
var ErrMappedFileChanged = errors.New("mapped file changed since the checkpoint")

// MappedCheck selects how Restore checks the recorded mapped files.
type MappedCheck string

const (
	// MappedCheckIdentity (the default) accepts a file whose device, inode,
	// size, mtime and ctime equal those recorded when its sha256 was taken
	// at checkpoint time: the file has not been written or replaced since
	// (ctime cannot be set back from user space). Any other file of the
	// right size is re-hashed and must match the recorded sha256 (a restore
	// on another node, or a model cache that re-downloaded the file).
	MappedCheckIdentity MappedCheck = ""
	// MappedCheckDigest always re-hashes every mapped file.
	MappedCheckDigest MappedCheck = "digest"
	// MappedCheckNone skips the check (CRIU still compares file sizes).
	MappedCheckNone MappedCheck = "none"
)

// FileIdentity is what stat says about a file; equal identities mean the
// file was neither written nor replaced in between.
type FileIdentity struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtimeNs"`
	CtimeNs int64  `json:"ctimeNs"`
}

// MappedFile is one privately mapped regular file of a checkpointed tree.
type MappedFile struct {
	// Path is the file as the tree mapped it (CRIU maps this path again).
	Path string `json:"path"`
	// Identity is the file's stat when SHA256 was computed.
	Identity FileIdentity `json:"identity"`
	// SHA256 is the digest of the whole file.
	SHA256 string `json:"sha256"`
	// local is where this process opens the file when it sees it under
	// another path than the tree did (a container's bind mount); empty: Path.
	local string
}

// open is the path this process opens f by.
func (f *MappedFile) open() string {
	if f.local != "" {
		return f.local
	}
	return f.Path
}

// Resolver maps a path as the checkpointed processes see it to the path
// this process opens the same file by. It reports false for a file it
// cannot place (for a container: one that is not under a bind mount, so it
// comes with the image). A nil Resolver means the same path.
type Resolver func(path string) (local string, ok bool)

func (r Resolver) resolve(path string) (string, bool) {
	if r == nil {
		return path, true
	}
	return r(path)
}

func identityOf(path string) (FileIdentity, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return FileIdentity{}, err
	}
	return FileIdentity{
		Dev: st.Dev, Ino: st.Ino, Size: st.Size,
		MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(),
	}, nil
}

// mapsEntry is one file-backed line of /proc/<pid>/maps.
type mapsEntry struct {
	addr    string // "start-end", the name under /proc/<pid>/map_files
	private bool
	path    string
}

// parseMaps returns the file-backed mappings of a /proc/<pid>/maps listing:
// lines whose path is absolute and not a deleted file.
func parseMaps(r io.Reader) ([]mapsEntry, error) {
	var out []mapsEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// addr perms offset dev inode path; the path may contain spaces.
		f := strings.SplitN(sc.Text(), " ", 6)
		if len(f) < 6 || len(f[1]) != 4 {
			continue
		}
		p := strings.TrimLeft(f[5], " ")
		if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, " (deleted)") {
			continue
		}
		out = append(out, mapsEntry{addr: f[0], private: f[1][3] == 'p', path: p})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return out, nil
}

// ScanMappedFiles lists the regular files the pids map privately, once
// each, found through resolve. Shared mappings are left out: their content
// lives in the file by design, so a restore must see the file as it is then.
// A file whose path now names another file than the one mapped, or that
// resolve cannot place, is left out too (CRIU handles those). It runs
// before the dump, which may end the processes.
func ScanMappedFiles(ctx context.Context, pids []int, resolve Resolver) ([]MappedFile, error) {
	logger := klog.FromContext(ctx)
	seen := map[string]bool{}
	var out []MappedFile
	for _, pid := range pids {
		f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
		if errors.Is(err, os.ErrNotExist) {
			continue // exited meanwhile: nothing of it gets dumped
		}
		if err != nil {
			return nil, fmt.Errorf("mapped files of pid %d: %w", pid, err)
		}
		entries, err := parseMaps(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("mapped files of pid %d: %w", pid, err)
		}
		for _, e := range entries {
			if !e.private || seen[e.path] {
				continue
			}
			seen[e.path] = true
			local, ok := resolve.resolve(e.path)
			if !ok {
				logger.V(2).Info("Mapped file outside what the resolver places, left to CRIU", "pid", pid, "path", e.path)
				continue
			}
			id, err := identityOf(local)
			if err != nil {
				logger.V(2).Info("Mapped file not reachable by path, left to CRIU", "pid", pid, "path", e.path, "err", err)
				continue
			}
			var mst syscall.Stat_t
			if err := syscall.Stat(fmt.Sprintf("/proc/%d/map_files/%s", pid, e.addr), &mst); err == nil &&
				(mst.Dev != id.Dev || mst.Ino != id.Ino) {
				logger.V(2).Info("Mapped file was replaced at its path, left to CRIU", "pid", pid, "path", e.path)
				continue
			}
			if st, err := os.Stat(local); err != nil || !st.Mode().IsRegular() {
				continue
			}
			f := MappedFile{Path: e.path, Identity: id}
			if local != e.path {
				f.local = local
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// DigestCache caches file sha256s by identity, so re-checkpoints of an agent
// that maps large unchanged weights do not hash them again. The zero value
// is ready for use, also concurrently; it must not be copied after use.
type DigestCache struct{ m sync.Map }

// RecordMappedFiles fills in the sha256 of files (through cache, which may
// be nil) and writes their record into dir, where CheckMappedFiles and
// CheckMappedFilesIn read it. Nothing is written for no files.
func RecordMappedFiles(dir string, files []MappedFile, cache *DigestCache) error {
	if len(files) == 0 {
		return nil
	}
	if cache == nil {
		cache = &DigestCache{}
	}
	if err := cache.fill(files); err != nil {
		return err
	}
	return writeMapped(dir, files)
}

// fill computes each file's sha256 (or takes it from the cache) and checks
// that the file did not change while it was hashed.
func (d *DigestCache) fill(files []MappedFile) error {
	for i := range files {
		f := &files[i]
		if v, ok := d.m.Load(f.Identity); ok {
			f.SHA256 = v.(string)
			continue
		}
		sum, err := hashFile(f.open())
		if err != nil {
			return fmt.Errorf("mapped file %s: %w", f.Path, err)
		}
		after, err := identityOf(f.open())
		if err != nil {
			return fmt.Errorf("mapped file %s: %w", f.Path, err)
		}
		if after != f.Identity {
			return fmt.Errorf("mapped file %s changed while the checkpoint hashed it: %w", f.Path, ErrMappedFileChanged)
		}
		f.SHA256 = sum
		d.m.Store(f.Identity, sum)
	}
	return nil
}

func hashFile(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, fh, make([]byte, 1<<20)); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeMapped records files in imageDir.
func writeMapped(imageDir string, files []MappedFile) error {
	b, err := json.MarshalIndent(files, "", " ")
	if err != nil {
		return fmt.Errorf("encode mapped files: %w", err)
	}
	if err := os.WriteFile(filepath.Join(imageDir, MappedFilesName), b, 0o644); err != nil {
		return fmt.Errorf("write mapped files: %w", err)
	}
	return nil
}

// readMapped reads the record from imageDir; checkpoints without one (made
// before it existed) have nothing to check.
func readMapped(imageDir string) ([]MappedFile, error) {
	b, err := os.ReadFile(filepath.Join(imageDir, MappedFilesName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read mapped files: %w", err)
	}
	var files []MappedFile
	if err := json.Unmarshal(b, &files); err != nil {
		return nil, fmt.Errorf("decode %s: %w", MappedFilesName, err)
	}
	return files, nil
}

// CheckMappedFiles checks the mapped-file record of a fetched image
// directory as Restore does before CRIU runs; a directory without a record
// passes. Errors about changed files wrap ErrMappedFileChanged.
func CheckMappedFiles(imageDir string, check MappedCheck) error {
	return CheckMappedFilesIn(imageDir, check, nil)
}

// CheckMappedFilesIn is CheckMappedFiles for a tree that will see the files
// through resolve (a restored container's bind mounts). A recorded file that
// resolve can no longer place counts as changed.
func CheckMappedFilesIn(imageDir string, check MappedCheck, resolve Resolver) error {
	files, err := readMapped(imageDir)
	if err != nil {
		return err
	}
	return verifyMapped(files, check, resolve)
}

// verifyMapped checks that every recorded file is still the one the tree
// had mapped; the error wraps ErrMappedFileChanged and names the file and
// the field that differs.
func verifyMapped(files []MappedFile, check MappedCheck, resolve Resolver) error {
	if check == MappedCheckNone {
		return nil
	}
	if check != MappedCheckIdentity && check != MappedCheckDigest {
		return fmt.Errorf("invalid MappedCheck %q", check)
	}
	for _, f := range files {
		local, ok := resolve.resolve(f.Path)
		if !ok {
			return fmt.Errorf("mapped file %s: no longer reachable (its mount is gone): %w", f.Path, ErrMappedFileChanged)
		}
		id, err := identityOf(local)
		if err != nil {
			return fmt.Errorf("mapped file %s: %v: %w", f.Path, err, ErrMappedFileChanged)
		}
		if id.Size != f.Identity.Size {
			return fmt.Errorf("mapped file %s: size %d, checkpoint recorded %d: %w", f.Path, id.Size, f.Identity.Size, ErrMappedFileChanged)
		}
		if check == MappedCheckIdentity && id == f.Identity {
			continue
		}
		sum, err := hashFile(local)
		if err != nil {
			return fmt.Errorf("mapped file %s: %v: %w", f.Path, err, ErrMappedFileChanged)
		}
		if sum != f.SHA256 {
			return fmt.Errorf("mapped file %s: sha256 %s, checkpoint recorded %s: %w", f.Path, sum, f.SHA256, ErrMappedFileChanged)
		}
	}
	return nil
}
