// Package checkpoint persists the driver's prepared-claim state: versioned JSON with a sha256
// checksum over the payload and the boot id it was written in, replaced atomically (temp file,
// fsync, rename, optionally fsync of the directory) so a crash leaves either the old or the new
// file.
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

	"github.com/neuronetes/neuronetes/driver/model"
)

// Versions lists every checkpoint format version this code reads, oldest first. The last one is
// written.
var Versions = []string{"v1"}

// CurrentVersion is the version Save writes.
const CurrentVersion = "v1"

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
		payload, err = json.Marshal(d)
	default:
		return nil, fmt.Errorf("checkpoint version %q: unsupported, want one of %v", version, Versions)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint data: %w", err)
	}
	sum := sha256.Sum256(payload)
	return json.MarshalIndent(envelope{Version: version, BootID: bootID, Checksum: hex.EncodeToString(sum[:]), Data: payload}, "", " ")
}

// Decode parses a checkpoint of any supported version and verifies its checksum. Errors that
// mean "do not trust this file" wrap ErrCorrupt.
func Decode(raw []byte) (Data, string, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return Data{}, "", fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	// MarshalIndent re-indents the embedded payload; compact it back before hashing.
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
	case "v1":
		dec := json.NewDecoder(bytes.NewReader(compact.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return Data{}, "", fmt.Errorf("%w: v1 data: %w", ErrCorrupt, err)
		}
	default:
		return Data{}, "", fmt.Errorf("%w: version %q unsupported, want one of %v", ErrCorrupt, env.Version, Versions)
	}
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	return d, env.BootID, nil
}

// BootID returns the kernel's boot id, or "" when unavailable.
func BootID() string {
	raw, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// Store reads and writes one checkpoint file.
type Store struct {
	// Path is the checkpoint file.
	Path string
	// BootID is written into every checkpoint.
	BootID string
	// SyncDir makes Save also fsync the directory after the rename (see Save).
	SyncDir bool
}

// Load reads the checkpoint. A missing file yields empty data and no error. A corrupt file yields
// an error wrapping ErrCorrupt. PrepareStarted claims from the intent file (see SaveIntent) that the
// durable checkpoint does not know are merged in; an unreadable intent file is ignored.
func (s *Store) Load() (Data, string, error) {
	d, boot, err := s.loadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		d, boot, err = Data{Claims: map[string]Claim{}}, s.BootID, nil
	}
	if err != nil {
		return Data{}, "", err
	}
	if intent, iboot, ierr := s.loadFile(s.IntentPath()); ierr == nil && iboot == boot {
		for uid, c := range intent.Claims {
			if _, known := d.Claims[uid]; !known && c.State == PrepareStarted {
				d.Claims[uid] = c
			}
		}
	}
	return d, boot, nil
}

func (s *Store) loadFile(path string) (Data, string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Data{}, "", err
	}
	if err != nil {
		return Data{}, "", fmt.Errorf("%w: read %s: %w", ErrCorrupt, path, err)
	}
	return Decode(raw)
}

// IntentPath is the file SaveIntent writes.
func (s *Store) IntentPath() string { return s.Path + ".intent" }

// Save writes d atomically (temp file in the same directory, fsync, rename; with SyncDir also an
// fsync of the directory) and then drops the intent file, whose claims d supersedes.
//
// Why the directory fsync is optional: it only decides whether the old or the new checkpoint is
// seen after a power loss or kernel crash, and after those the boot id changes and every claim is
// rolled back anyway (devices, MIG instances and CDI specs do not survive a reboot). Process
// crashes lose nothing that was renamed. The file fsync stays, so a power loss never leaves a torn
// checkpoint behind (which would raise a false CheckpointCorrupt event).
func (s *Store) Save(d Data) error {
	raw, err := Encode(CurrentVersion, s.BootID, d)
	if err != nil {
		return err
	}
	level := syncFile
	if s.SyncDir {
		level = syncAll
	}
	if err := writeAtomic(s.Path, raw, level); err != nil {
		return err
	}
	if err := os.Remove(s.IntentPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove intent %s: %w", s.IntentPath(), err)
	}
	return nil
}

// SaveIntent records d in the intent file, atomically for readers (temp file and rename) but
// without fsync: a crash may lose it or, at worst, leave it unreadable, and it never touches the
// durable checkpoint. Use it only for PrepareStarted records whose loss start-up recovery covers
// (in dynamic MIG mode every MIG instance no completed claim owns is destroyed; orphaned CDI specs
// are removed).
func (s *Store) SaveIntent(d Data) error {
	raw, err := Encode(CurrentVersion, s.BootID, d)
	if err != nil {
		return err
	}
	return writeAtomic(s.IntentPath(), raw, syncNone)
}

// Quarantine moves a corrupt checkpoint aside (to <path>.corrupt) so it can be inspected and the
// driver can start from a clean state.
func (s *Store) Quarantine() (string, error) {
	_ = os.Remove(s.IntentPath())
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
