package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// DefaultLocalCacheBytes bounds the local cache when Engine.LocalCacheBytes is not set.
const DefaultLocalCacheBytes = 8 << 30

// cacheFiles is the file in a local cache entry that lists the stored manifest's files.
const cacheFiles = ".neuronetes-files.json"

// localCache keeps this node's own container dumps after they are stored (Engine.LocalCacheDir):
// a restore on the same node of a checkpoint whose signed manifest lists exactly the files of an
// entry uses the entry's images in place instead of fetching and verifying the whole image from
// the store. Entries live under <dir>/<namespace>/<agent>/<id> (names the store validated), one
// per key (the latest dump), at most limit bytes in all (oldest first out); an entry in use by a
// restore is not removed.
type localCache struct {
	mu    sync.Mutex
	inUse map[string]int
}

// cachedFile is what an entry records of each file of the stored manifest.
type cachedFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func cacheRecord(m *store.Manifest) []cachedFile {
	out := make([]cachedFile, 0, len(m.Files))
	for _, f := range m.Files {
		out = append(out, cachedFile{f.Path, f.Size, f.SHA256})
	}
	return out
}

func (e *Engine) cacheEntry(k store.Key, id string) string {
	return filepath.Join(e.LocalCacheDir, k.Namespace, k.Agent, id)
}

// cacheKeep moves the image directory dir of a dump stored as m into the local cache (a rename
// when it is on the same filesystem, else a copy), replacing the key's other entries, and evicts
// the oldest entries over the byte limit. Errors are logged: the cache is an optimisation.
func (e *Engine) cacheKeep(ctx context.Context, dir string, m *store.Manifest) {
	if e.LocalCacheDir == "" {
		return
	}
	logger := klog.FromContext(ctx).WithValues("key", m.Key.String(), "id", m.ID)
	dst := e.cacheEntry(m.Key, m.ID)
	b, err := json.Marshal(cacheRecord(m))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, cacheFiles), b, 0o600)
	}
	if err == nil {
		_ = os.RemoveAll(dst)
		err = cacheMove(dir, dst)
	}
	if err != nil {
		_ = os.RemoveAll(dst)
		logger.Error(err, "Keeping the dump in the local checkpoint cache")
		return
	}
	siblings, _ := os.ReadDir(filepath.Dir(dst))
	for _, s := range siblings {
		if s.Name() != m.ID {
			e.cacheRemove(filepath.Join(filepath.Dir(dst), s.Name()))
		}
	}
	e.cacheEvict()
	logger.V(2).Info("Kept the dump in the local checkpoint cache", "dir", dst)
}

// cacheMove renames (or, across filesystems, copies) dir to dst, creating dst's parents; the
// parents are made again once when an eviction (EvictCached) removed them in between.
func cacheMove(dir, dst string) error {
	var err error
	for range 2 {
		if err = os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err = os.Rename(dir, dst); errors.Is(err, syscall.EXDEV) {
			return copyTree(dir, dst)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

// cacheLookup returns the local cache entry of k/id when the signed manifest m lists exactly
// its files (path, size, sha256 as recorded when it was stored) and every file has its size; the
// entry is held until release is called.
func (e *Engine) cacheLookup(k store.Key, id string, m *store.Manifest) (string, func(), bool) {
	if e.LocalCacheDir == "" || m == nil {
		return "", nil, false
	}
	dir := e.cacheEntry(k, id)
	e.cache.mu.Lock() // no eviction between the check and the hold
	defer e.cache.mu.Unlock()
	b, err := os.ReadFile(filepath.Join(dir, cacheFiles))
	if err != nil {
		return "", nil, false
	}
	var got []cachedFile
	want := cacheRecord(m)
	if json.Unmarshal(b, &got) != nil || len(got) != len(want) {
		return "", nil, false
	}
	for i := range want {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(want[i].Path)))
		if got[i] != want[i] || err != nil || fi.Size() != want[i].Size {
			return "", nil, false
		}
	}
	if e.cache.inUse == nil {
		e.cache.inUse = map[string]int{}
	}
	e.cache.inUse[dir]++
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // most recently used
	var once sync.Once
	return dir, func() {
		once.Do(func() {
			e.cache.mu.Lock()
			defer e.cache.mu.Unlock()
			if e.cache.inUse[dir]--; e.cache.inUse[dir] <= 0 {
				delete(e.cache.inUse, dir)
			}
		})
	}, true
}

// cacheRemove removes an entry unless a restore uses it.
func (e *Engine) cacheRemove(dir string) {
	e.cache.mu.Lock()
	defer e.cache.mu.Unlock()
	if e.cache.inUse[dir] == 0 {
		_ = os.RemoveAll(dir)
	}
}

// cacheEvict removes the least recently used entries while the cache holds more than its limit.
func (e *Engine) cacheEvict() {
	limit := e.LocalCacheBytes
	if limit <= 0 {
		limit = DefaultLocalCacheBytes
	}
	type entry struct {
		dir   string
		bytes int64
		used  time.Time
	}
	var entries []entry
	var total int64
	nsDirs, _ := filepath.Glob(filepath.Join(e.LocalCacheDir, "*", "*", "*"))
	for _, d := range nsDirs {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() {
			continue
		}
		n := dirSize(d)
		entries = append(entries, entry{d, n, fi.ModTime()})
		total += n
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].used.Before(entries[j].used) })
	for _, en := range entries {
		if total <= limit {
			return
		}
		e.cacheRemove(en.dir)
		if _, err := os.Stat(en.dir); err != nil {
			total -= en.bytes
		}
	}
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// copyTree copies the regular files and directories of src to dst (which must not exist).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("copy %s: not a regular file", p)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		fi, _ := in.Stat()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
