package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// Store reads and writes one checkpoint file. The file is a slot file (see slots.go). By default a
// save writes the whole file atomically: temp file, fsync, rename. With InPlace a save overwrites
// the older of two slots in place and fdatasyncs it instead, which is one durable write with no
// metadata to commit. Either way an intent goes to a third region with no sync at all. Files written by
// earlier versions (a bare envelope) are read and replaced by a slot file at the first save. A
// Store is safe for concurrent use; two processes may share the file as long as their saves are
// serialized (the kubelet plugin library's lock does that during a rolling update).
type Store struct {
	// Path is the checkpoint file.
	Path string
	// BootID is written into every checkpoint.
	BootID string
	// SyncDir makes the saves that create or enlarge the file also fsync the directory after the
	// rename (see Save). In-place saves change no directory entry.
	SyncDir bool
	// InPlace makes saves overwrite the older slot in place with one fdatasync instead of writing a
	// temp file, fsyncing and renaming it. Both keep the old-or-new guarantee (a torn slot fails
	// its checksum and the other slot wins); in place skips the journal commit that creating and
	// renaming a file costs (about 1.35x an fsync'ed 4 KiB write on ext4, docs/driver.md).
	InPlace bool

	mu sync.Mutex
	// cur describes the file as this store last read or wrote it; cur.valid is false when that is
	// unknown (nothing read yet, a bare-envelope file, a failed write).
	cur fileState
	// rewrite is set by a failed write and cleared by the next successful whole-file write: after a
	// failed write or fdatasync the page cache no longer tells what the disk holds, so in-place
	// saves stop until the file has been rewritten and fsynced whole.
	rewrite bool
}

// fileState is what a Store knows about the slot file on disk.
type fileState struct {
	valid    bool
	slotSize int64
	slotFile
	// headers are the region headers as last validated. A load that finds them byte-identical
	// returns a copy of the cached state without reading the payloads again: every write changes
	// its region's header (a save bumps the generation, an intent carries a new crc).
	headers [regions][headerSize]byte
}

// Load reads the checkpoint. A missing file yields empty data and no error. A corrupt file yields
// an error wrapping ErrCorrupt. PrepareStarted claims of a current intent (see SaveIntent) that
// the durable state does not know are merged in. The result is the caller's to modify.
func (s *Store) Load() (Data, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.loadLocked()
	if errors.Is(err, os.ErrNotExist) {
		return Data{Claims: map[string]Claim{}}, s.BootID, nil
	}
	if err != nil {
		return Data{}, "", err
	}
	d := f.data.Clone()
	if f.intent != nil {
		for uid, c := range f.intent.Claims {
			if _, known := d.Claims[uid]; !known && c.State == PrepareStarted {
				d.Claims[uid] = Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name, State: c.State, Devices: cloneDevices(c.Devices)}
			}
		}
	}
	return d, f.boot, nil
}

// loadLocked reads the checkpoint file: a slot file (the cached state when the headers are
// unchanged) or a bare envelope.
func (s *Store) loadLocked() (slotFile, error) {
	f, err := os.Open(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		s.cur = fileState{}
		return slotFile{}, err
	}
	if err != nil {
		s.cur = fileState{}
		return slotFile{}, fmt.Errorf("%w: open %s: %w", ErrCorrupt, s.Path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		s.cur = fileState{}
		return slotFile{}, fmt.Errorf("%w: stat %s: %w", ErrCorrupt, s.Path, err)
	}
	if c := &s.cur; c.valid && st.Size() == regions*c.slotSize {
		var h [regions][headerSize]byte
		same := true
		for i := range h {
			if _, err := f.ReadAt(h[i][:], int64(i)*c.slotSize); err != nil {
				same = false
			}
		}
		if same && h == c.headers {
			return c.slotFile, nil
		}
	}
	s.cur = fileState{}
	raw := make([]byte, st.Size())
	if _, err := f.ReadAt(raw, 0); err != nil {
		return slotFile{}, fmt.Errorf("%w: read %s: %w", ErrCorrupt, s.Path, err)
	}
	if !isSlotFile(raw) {
		// A bare envelope from an earlier version; the next save replaces it.
		d, boot, err := Decode(raw)
		return slotFile{data: d, boot: boot}, err
	}
	sf, err := readSlots(raw)
	if err != nil {
		return slotFile{}, fmt.Errorf("%s: %w", s.Path, err)
	}
	size := int64(len(raw) / regions)
	s.cur = fileState{valid: true, slotSize: size, slotFile: sf}
	for i := range s.cur.headers {
		copy(s.cur.headers[i][:], raw[int64(i)*size:])
	}
	return sf, nil
}

// Save makes d the durable checkpoint; it retires any intent.
//
// The file is written whole and atomically: temp file, fsync, rename, and with SyncDir an fsync of
// the directory. With InPlace, d goes into the older slot of the file, in place, followed by one
// fdatasync (see slots.go), unless the file must be created, enlarged (d no longer fits a slot) or
// rewritten (its state is unknown: never read, an earlier version's layout, a failed write).
//
// Why the directory fsync is optional: it only decides whether the old or the new file is seen
// after a power loss or kernel crash, and after those the boot id changes and every claim is
// rolled back anyway (devices, MIG instances and CDI specs do not survive a reboot). Process
// crashes lose nothing that was renamed. The file fsync stays, so a power loss never leaves a torn
// checkpoint behind (which would raise a false CheckpointCorrupt event).
func (s *Store) Save(d Data) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	payload, err := Encode(CurrentVersion, s.BootID, d)
	if err != nil {
		return err
	}
	return s.saveLocked(d, payload)
}

func (s *Store) saveLocked(d Data, payload []byte) error {
	c := s.cur
	gen := c.gen + 1
	if s.InPlace && c.valid && !s.rewrite && int64(headerSize+len(payload)) <= c.slotSize {
		target := 1 - c.newest
		hdr := regionHeader(slotMagic, gen, payload)
		err := regionWriter(s.Path, c.slotSize, target, hdr, payload, true)
		if err == nil {
			s.cur.slotFile = slotFile{newest: target, gen: gen, data: d.Clone(), boot: s.BootID}
			copy(s.cur.headers[target][:], hdr)
			return nil
		}
		if !errors.Is(err, errResized) && !errors.Is(err, os.ErrNotExist) {
			// The slot may be half written; the other one still holds the previous state.
			s.cur, s.rewrite = fileState{}, true
			return err
		}
		// Another process replaced the file: rewrite it whole below.
	}
	size := slotSizeFor(len(payload))
	level := syncFile
	if s.SyncDir {
		level = syncAll
	}
	file := newSlotFile(size, gen, payload)
	if err := writeAtomic(s.Path, file, level); err != nil {
		s.cur, s.rewrite = fileState{}, true
		return err
	}
	s.rewrite = false
	// Earlier versions kept intents in a file of their own; a slot file supersedes it.
	_ = os.Remove(s.Path + ".intent")
	s.cur = fileState{valid: true, slotSize: size, slotFile: slotFile{newest: 0, gen: gen, data: d.Clone(), boot: s.BootID}}
	for i := range s.cur.headers {
		copy(s.cur.headers[i][:], file[int64(i)*size:])
	}
	return nil
}

// SaveIntent records d as an intent: written in place with no sync, readers see it (merged into
// the durable state by Load) until the next Save. A crash may lose it or leave it torn, which makes
// Load ignore it. Use it only for PrepareStarted records whose loss start-up recovery covers (in
// dynamic MIG mode every MIG instance no completed claim owns is destroyed; orphaned CDI specs are
// removed). When the file is not a known slot file yet, or d does not fit its intent region, d is
// saved durably instead, which is stronger than an intent.
func (s *Store) SaveIntent(d Data) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	payload, err := Encode(CurrentVersion, s.BootID, d)
	if err != nil {
		return err
	}
	c := s.cur
	if !c.valid || s.rewrite || int64(headerSize+len(payload)) > c.slotSize {
		return s.saveLocked(d, payload)
	}
	hdr := regionHeader(intentMagic, c.gen, payload)
	if err := regionWriter(s.Path, c.slotSize, intentRegion, hdr, payload, false); err != nil {
		if errors.Is(err, errResized) || errors.Is(err, os.ErrNotExist) {
			return s.saveLocked(d, payload)
		}
		s.cur, s.rewrite = fileState{}, true
		return err
	}
	intent := d.Clone()
	s.cur.intent = &intent
	copy(s.cur.headers[intentRegion][:], hdr)
	return nil
}

// Quarantine moves a corrupt checkpoint aside (to <path>.corrupt) so it can be inspected and the
// driver can start from a clean state.
func (s *Store) Quarantine() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = fileState{}
	dst := s.Path + ".corrupt"
	if err := os.Rename(s.Path, dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("quarantine %s: %w", s.Path, err)
	}
	return dst, nil
}
