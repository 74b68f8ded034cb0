// Package checkpoint persists the driver's prepared-claim state: versioned JSON with a sha256
// checksum over the payload and the boot id it was written in. The file holds two slots that are
// written in turn, in place, each save made durable by one fdatasync; a reader takes the newest
// valid slot, so a crash leaves either the old or the new state (see slots.go).
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/neuronetes/neuronetes/driver/model"
)

// Versions lists every checkpoint format version this code reads, oldest first. The last one is
// written. v2 adds Device.Env, so that a CDI spec can be rebuilt from the checkpoint alone.
var Versions = []string{"v1", "v2"}

// CurrentVersion is the version Save writes.
const CurrentVersion = "v2"

// ClaimState is the progress of one claim's preparation.
type ClaimState string

const (
	// PrepareStarted is recorded before any device is touched; a claim found in this state at
	// start-up was interrupted and gets rolled back.
	PrepareStarted ClaimState = "PrepareStarted"
	// PrepareCompleted is recorded once every device and the CDI spec are ready.
	PrepareCompleted ClaimState = "PrepareCompleted"
)

// Device is one prepared device of a claim.
type Device struct {
	// Requests are the claim requests the device was allocated for.
	Requests []string `json:"requests,omitempty"`
	// Pool and Name identify the published device.
	Pool string `json:"pool"`
	Name string `json:"name"`
	// GPUUUID is the physical GPU.
	GPUUUID string `json:"gpuUUID"`
	// MIGProfileID and Placement are set for dynamic MIG devices (the planned instance).
	MIGProfileID *int             `json:"migProfileID,omitempty"`
	Placement    *model.Placement `json:"placement,omitempty"`
	// MIG is the created (or static) MIG instance; nil for whole GPUs and not-yet-created ones.
	MIG *model.MIGInstance `json:"mig,omitempty"`
	// Dynamic is true when the driver created the MIG instance and must destroy it.
	Dynamic bool `json:"dynamic,omitempty"`
	// CDIDeviceIDs are the fully qualified CDI device ids handed to the kubelet.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// Env is the device's extra container environment from the opaque config (v2 and later).
	Env []string `json:"env,omitempty"`
}

// Claim is the recorded state of one claim.
type Claim struct {
	UID       string     `json:"uid"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	State     ClaimState `json:"state"`
	Devices   []Device   `json:"devices,omitempty"`
}

// Data is the checkpointed state: claims by UID.
type Data struct {
	Claims map[string]Claim `json:"claims"`
}

// Clone returns a deep copy of d: changing the copy never changes d. Like a round trip through
// the file (the fields are omitempty), it turns empty slices into nil ones.
func (d Data) Clone() Data {
	out := Data{Claims: make(map[string]Claim, len(d.Claims))}
	for uid, c := range d.Claims {
		c.Devices = cloneDevices(c.Devices)
		out.Claims[uid] = c
	}
	return out
}

func cloneDevices(devs []Device) []Device {
	if len(devs) == 0 {
		return nil
	}
	out := make([]Device, len(devs))
	for i, d := range devs {
		d.Requests = cloneStrings(d.Requests)
		d.CDIDeviceIDs = cloneStrings(d.CDIDeviceIDs)
		d.Env = cloneStrings(d.Env)
		d.MIGProfileID = clonePtr(d.MIGProfileID)
		d.Placement = clonePtr(d.Placement)
		d.MIG = clonePtr(d.MIG)
		out[i] = d
	}
	return out
}

func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string{}, s...)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// envelope is the file layout shared by every version: the checksum covers Data byte for byte.
type envelope struct {
	Version  string          `json:"version"`
	BootID   string          `json:"bootID"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// ErrCorrupt marks a checkpoint that exists but cannot be trusted (bad JSON, checksum mismatch,
// unknown version).
var ErrCorrupt = errors.New("checkpoint corrupt")

// Encode serializes d in the given version.
func Encode(version, bootID string, d Data) ([]byte, error) {
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	var payload []byte
	var err error
	switch version {
	case "v1":
		if err := fieldsOfV2(d); err != nil {
			return nil, fmt.Errorf("checkpoint version v1: %w", err)
		}
		payload, err = json.Marshal(d)
	case "v2":
		payload, err = json.Marshal(d)
	default:
		return nil, fmt.Errorf("checkpoint version %q: unsupported, want one of %v", version, Versions)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint data: %w", err)
	}
	sum := sha256.Sum256(payload)
	return json.Marshal(envelope{Version: version, BootID: bootID, Checksum: hex.EncodeToString(sum[:]), Data: payload})
}

// Decode parses a checkpoint of any supported version and verifies its checksum. Errors that
// mean "do not trust this file" wrap ErrCorrupt.
func Decode(raw []byte) (Data, string, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return Data{}, "", fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	// Earlier versions wrote an indented envelope, which re-indents the embedded payload; compact
	// it back before hashing.
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.Data); err != nil {
		return Data{}, "", fmt.Errorf("%w: data: %w", ErrCorrupt, err)
	}
	sum := sha256.Sum256(compact.Bytes())
	if hex.EncodeToString(sum[:]) != env.Checksum {
		return Data{}, "", fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	var d Data
	switch env.Version {
	case "v1", "v2":
		dec := json.NewDecoder(bytes.NewReader(compact.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return Data{}, "", fmt.Errorf("%w: %s data: %w", ErrCorrupt, env.Version, err)
		}
		if env.Version == "v1" {
			if err := fieldsOfV2(d); err != nil {
				return Data{}, "", fmt.Errorf("%w: v1 data: %w", ErrCorrupt, err)
			}
		}
	default:
		return Data{}, "", fmt.Errorf("%w: version %q unsupported, want one of %v", ErrCorrupt, env.Version, Versions)
	}
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	return d, env.BootID, nil
}

// fieldsOfV2 rejects data that uses fields v1 does not have.
func fieldsOfV2(d Data) error {
	for uid, c := range d.Claims {
		for i, dev := range c.Devices {
			if len(dev.Env) > 0 {
				return fmt.Errorf("claims[%s].devices[%d].env: field needs version v2", uid, i)
			}
		}
	}
	return nil
}

// BootID returns the kernel's boot id, or "" when unavailable.
func BootID() string {
	raw, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// Store reads and writes one checkpoint file. The file is a slot file (see slots.go): a save
// overwrites the older of two slots in place and fdatasyncs it, which is one durable write with no
// metadata to commit; an intent goes to a third region with no sync at all. Files written by
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
// In the common case d goes into the older slot of the file, in place, followed by one fdatasync
// (see slots.go). The file is created, enlarged (d no longer fits a slot) or rewritten (its state
// is unknown: never read, an earlier version's layout, a failed write) atomically instead: temp
// file, fsync, rename, and with SyncDir an fsync of the directory.
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
	if c.valid && !s.rewrite && int64(headerSize+len(payload)) <= c.slotSize {
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

// WriteAtomic replaces path with data so that a crash leaves either the old or the new content,
// and the new content once it returns.
func WriteAtomic(path string, data []byte) error { return writeAtomic(path, data, syncAll) }

// syncLevel says how much of an atomic replace is made durable.
type syncLevel int

const (
	syncNone syncLevel = iota // temp file and rename only: atomic for readers and process crashes
	syncFile                  // plus fsync of the file before the rename: never torn after power loss
	syncAll                   // plus fsync of the directory: the rename itself survives power loss
)

// writeAtomic writes a temp file and renames it over path, with the given durability.
func writeAtomic(path string, data []byte, level syncLevel) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp in %s: %w", dir, err)
	}
	tmp := f.Name()
	fail := func(format string, err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf(format, tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail("write %s: %w", err)
	}
	if level >= syncFile {
		if err := f.Sync(); err != nil {
			return fail("fsync %s: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	if level < syncAll {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
