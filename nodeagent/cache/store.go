package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Options configure a Store.
type Options struct {
	// DiskBudget is the most bytes the verified entries may take; 0 means unlimited. Admitting a new
	// entry evicts least recently used unpinned entries first; a fetch that cannot fit fails.
	DiskBudget int64
	// MaxConcurrent is the most fetches that run at once on this node; 0 means 2.
	MaxConcurrent int
	// ProgressInterval is how often a running fetch reports progress; 0 means 2s.
	ProgressInterval time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
	// Observer receives fetch events (metrics); may be nil.
	Observer Observer
	// PartialTTL is how long an abandoned partial download is kept for resuming; Open removes older
	// ones. 0 means 7 days.
	PartialTTL time.Duration
}

// Observer receives cache events, e.g. to update metrics.
type Observer interface {
	// Hit is called when a requested entry was already cached.
	Hit(hex string)
	// Fetched is called for every chunk of bytes written from a source.
	Fetched(hex string, n int64)
	// Completed is called once an entry is verified and visible, with the fetch duration.
	Completed(hex string, size int64, d time.Duration)
	// Evicted is called when an entry is removed.
	Evicted(hex string, size int64)
}

// Entry describes a verified entry.
type Entry struct {
	// Hex is the sha256 of the content.
	Hex string
	// Path is the entry's file.
	Path string
	// Size is the content length in bytes.
	Size int64
	// LastUsed orders eviction (least recent first); persisted as the file's mtime.
	LastUsed time.Time
	// Pinned lists the holders (e.g. pod UIDs) that keep the entry from eviction.
	Pinned []string
}

// Store is a content-addressed cache directory. It is safe for concurrent use by goroutines of one
// process; a second process on the same directory is tolerated (per-digest file locks) but the disk
// budget is accounted per process.
type Store struct {
	root string
	opts Options
	sem  chan struct{} // shared fetch slots (prewarm)
	sf   singleflight.Group

	urgentSem chan struct{} // fetch slots of pods bound to the node (priority.go)

	mu       sync.Mutex
	entries  map[string]*Entry              // hex -> verified entry; invariant: file exists at Path
	pins     map[string]map[string]struct{} // hex -> holders; may name entries not (yet) present
	inflight map[string]int64               // hex -> bytes reserved against DiskBudget by a running fetch
	progress map[string]Progress            // hex -> last progress of a running fetch
	promote  map[string]chan struct{}       // hex -> closed to move a queued prewarm to an urgent slot
}

// Open opens (creating if needed) the cache at root and indexes its entries. Entries are trusted by
// construction (renamed only after verification); Verify re-hashes one on demand.
func Open(root string, opts Options) (*Store, error) {
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 2
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PartialTTL <= 0 {
		opts.PartialTTL = 7 * 24 * time.Hour
	}
	s := &Store{
		root:      root,
		opts:      opts,
		sem:       make(chan struct{}, opts.MaxConcurrent),
		urgentSem: make(chan struct{}, opts.MaxConcurrent),
		promote:   map[string]chan struct{}{},
		entries:   map[string]*Entry{},
		pins:      map[string]map[string]struct{}{},
		inflight:  map[string]int64{},
		progress:  map[string]Progress{},
	}
	for _, d := range []string{s.entryDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
	}
	s.removeStalePartials()
	des, err := os.ReadDir(s.entryDir())
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	for _, de := range des {
		if validHex(de.Name()) != nil || !de.Type().IsRegular() {
			continue // not ours; never served
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		s.entries[de.Name()] = &Entry{Hex: de.Name(), Path: s.EntryPath(de.Name()), Size: info.Size(), LastUsed: info.ModTime()}
	}
	return s, nil
}

// removeStalePartials deletes partial downloads untouched for longer than PartialTTL: nobody asked for
// them again, and they use disk outside the budget.
func (s *Store) removeStalePartials() {
	des, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return
	}
	cutoff := s.opts.Now().Add(-s.opts.PartialTTL)
	for _, de := range des {
		if filepath.Ext(de.Name()) != ".partial" {
			continue
		}
		if info, err := de.Info(); err == nil && info.ModTime().Before(cutoff) {
			_ = os.Remove(filepath.Join(s.tmpDir(), de.Name()))
		}
	}
}

// Root returns the cache directory.
func (s *Store) Root() string { return s.root }

func (s *Store) entryDir() string { return filepath.Join(s.root, "sha256") }
func (s *Store) tmpDir() string   { return filepath.Join(s.root, "tmp") }

// EntryPath is where the entry for hex lives once verified (whether or not it exists now).
func (s *Store) EntryPath(hex string) string { return filepath.Join(s.entryDir(), hex) }

// Lookup returns the entry for hex if it is cached, and marks it used.
func (s *Store) Lookup(hex string) (Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[hex]
	if !ok {
		return Entry{}, false
	}
	s.touchLocked(e)
	return s.copyLocked(e), true
}

// Entries returns all verified entries, least recently used first.
func (s *Store) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, s.copyLocked(e))
	}
	sortLRU(out)
	return out
}

// UsedBytes is the total size of the verified entries.
func (s *Store) UsedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usedLocked()
}

func (s *Store) usedLocked() int64 {
	var n int64
	for _, e := range s.entries {
		n += e.Size
	}
	return n
}

// Pin keeps the entry hex from eviction while holder uses it. Pinning an absent entry is allowed (a pod
// may reference a model before it is cached).
func (s *Store) Pin(hex, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins[hex] == nil {
		s.pins[hex] = map[string]struct{}{}
	}
	s.pins[hex][holder] = struct{}{}
	s.promoteLocked(hex)
}

// Unpin drops holder's pin on hex.
func (s *Store) Unpin(hex, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pins[hex], holder)
	if len(s.pins[hex]) == 0 {
		delete(s.pins, hex)
	}
}

// SetPins replaces all pins with want (hex -> holders), e.g. from a full list of pods on the node.
func (s *Store) SetPins(want map[string][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pins = map[string]map[string]struct{}{}
	for hex, holders := range want {
		for _, h := range holders {
			if s.pins[hex] == nil {
				s.pins[hex] = map[string]struct{}{}
			}
			s.pins[hex][h] = struct{}{}
		}
		s.promoteLocked(hex)
	}
}

// Pinned reports whether hex has any holder.
func (s *Store) Pinned(hex string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pins[hex]) > 0
}

// Remove deletes the entry hex unless it is pinned.
func (s *Store) Remove(hex string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[hex]
	if !ok {
		return nil
	}
	if len(s.pins[hex]) > 0 {
		return fmt.Errorf("entry %s: %w", hex, ErrPinned)
	}
	return s.removeLocked(e)
}

// ErrPinned is returned when removing an entry that a holder uses.
var ErrPinned = errors.New("entry is pinned")

// ErrNoSpace is returned when an entry cannot fit in the disk budget even after evicting every
// unpinned entry.
var ErrNoSpace = errors.New("disk budget exhausted")

func (s *Store) removeLocked(e *Entry) error {
	if err := s.unexposeLocked(e.Hex); err != nil {
		return fmt.Errorf("remove ready links of %s: %w", e.Hex, err)
	}
	if err := os.Remove(e.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove entry %s: %w", e.Hex, err)
	}
	delete(s.entries, e.Hex)
	if s.opts.Observer != nil {
		s.opts.Observer.Evicted(e.Hex, e.Size)
	}
	return nil
}

// reserveLocked makes room for need bytes of hex's download under the disk budget by evicting least
// recently used unpinned entries, and records need as hex's reservation (replacing the one it held, so
// a download of unknown length grows its reservation by calling it again). It returns the evicted
// entries.
func (s *Store) reserveLocked(hex string, need int64, mayEvict bool) ([]Entry, error) {
	if s.opts.DiskBudget <= 0 {
		s.inflight[hex] = need
		return nil, nil
	}
	var reserved int64
	for h, r := range s.inflight {
		if h != hex {
			reserved += r
		}
	}
	used := s.usedLocked() + reserved
	if used+need <= s.opts.DiskBudget {
		s.inflight[hex] = need
		return nil, nil
	}
	if !mayEvict && len(s.pins[hex]) == 0 {
		// A prewarm whose digest a pod has since pinned may evict: it is no longer
		// opportunistic.
		return nil, fmt.Errorf("entry %s needs %d bytes, %d free and eviction not allowed: %w", hex, need, s.opts.DiskBudget-used, ErrNoSpace)
	}
	cands := make([]Entry, 0, len(s.entries))
	for h, e := range s.entries {
		if len(s.pins[h]) == 0 {
			cands = append(cands, *e)
		}
	}
	sortLRU(cands)
	var victims []Entry
	free := s.opts.DiskBudget - used
	for _, c := range cands {
		if free >= need {
			break
		}
		victims = append(victims, c)
		free += c.Size
	}
	if free < need {
		return nil, fmt.Errorf("entry %s needs %d bytes, %d free after evicting all unpinned entries: %w", hex, need, free, ErrNoSpace)
	}
	for _, v := range victims {
		if err := s.removeLocked(s.entries[v.Hex]); err != nil {
			return nil, err
		}
	}
	s.inflight[hex] = need
	return victims, nil
}

// Evict removes least recently used unpinned entries until the entries use at most budget bytes, and
// returns what it removed. Pinned entries are never removed, so the result may stay above budget.
func (s *Store) Evict(budget int64) ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		all = append(all, *e)
	}
	sortLRU(all)
	used := s.usedLocked()
	var out []Entry
	for _, e := range all {
		if used <= budget {
			break
		}
		if len(s.pins[e.Hex]) > 0 {
			continue
		}
		if err := s.removeLocked(s.entries[e.Hex]); err != nil {
			return out, err
		}
		used -= e.Size
		out = append(out, e)
	}
	return out, nil
}

func (s *Store) touchLocked(e *Entry) {
	now := s.opts.Now()
	if !now.After(e.LastUsed) {
		return
	}
	e.LastUsed = now
	_ = os.Chtimes(e.Path, time.Time{}, now) // best effort persistence of the LRU order
}

func (s *Store) copyLocked(e *Entry) Entry {
	c := *e
	for h := range s.pins[e.Hex] {
		c.Pinned = append(c.Pinned, h)
	}
	sort.Strings(c.Pinned)
	return c
}

// sortLRU orders entries least recently used first; ties break by hex for a stable order.
func sortLRU(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if !es[i].LastUsed.Equal(es[j].LastUsed) {
			return es[i].LastUsed.Before(es[j].LastUsed)
		}
		return es[i].Hex < es[j].Hex
	})
}

// ctxDone returns ctx.Err() if ctx is finished.
func ctxDone(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

// Peek returns the entry for hex without marking it used.
func (s *Store) Peek(hex string) (Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[hex]
	if !ok {
		return Entry{}, false
	}
	return s.copyLocked(e), true
}
