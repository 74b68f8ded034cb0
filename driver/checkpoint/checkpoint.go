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
	"time"

	"github.com/neuronetes/neuronetes/driver/model"
)

// Versions lists every checkpoint format version this code reads, oldest first. The last one is
// written. v2 adds Device.Env, so that a CDI spec can be rebuilt from the checkpoint alone. v3
// adds the sharing the driver applied (Device.TimeSlice, Claim.MPS), so that it is undone after a
// crash, and the GPUs' health (Data.Health), so that taints survive a restart.
var Versions = []string{"v1", "v2", "v3"}

// CurrentVersion is the version Save writes.
const CurrentVersion = "v3"

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
	// TimeSlice is the compute time slice set on the GPU for this device (v3 and later); it is
	// restored to the default when no other claim uses the GPU any more.
	TimeSlice *int `json:"timeSlice,omitempty"`
}

// MPSDaemon is an MPS control daemon the driver runs for some devices of a claim (v3 and later).
type MPSDaemon struct {
	// ID names the daemon's directory under the driver's MPS root.
	ID string `json:"id"`
	// Devices are the names of the claim's devices it serves.
	Devices []string `json:"devices"`
	// UUIDs are the GPU or MIG device UUIDs it serves (empty until the MIG devices exist).
	UUIDs []string `json:"uuids,omitempty"`
	// ActiveThreadPercentage, PinnedLimits (by UUID, "<MiB>M") and MultiUser are its settings,
	// kept so that a restarted driver starts it the same way.
	ActiveThreadPercentage *int              `json:"activeThreadPercentage,omitempty"`
	PinnedLimits           map[string]string `json:"pinnedLimits,omitempty"`
	MultiUser              bool              `json:"multiUser,omitempty"`
}

// Health is the recorded health of one GPU (v3 and later): what taints it.
type Health struct {
	// Lost is when the GPU was found lost (fell off the bus, stopped answering); zero if not lost.
	Lost time.Time `json:"lost,omitempty"`
	// FatalXID and FatalAt are the last fatal XID and when it happened.
	FatalXID uint64    `json:"fatalXID,omitempty"`
	FatalAt  time.Time `json:"fatalAt,omitempty"`
	// InfoXID and InfoAt are the last informational XID and when it happened.
	InfoXID uint64    `json:"infoXID,omitempty"`
	InfoAt  time.Time `json:"infoAt,omitempty"`
}

// Claim is the recorded state of one claim.
type Claim struct {
	UID       string     `json:"uid"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	State     ClaimState `json:"state"`
	Devices   []Device   `json:"devices,omitempty"`
	// MPS lists the MPS control daemons of the claim (v3 and later).
	MPS []MPSDaemon `json:"mps,omitempty"`
}

// Data is the checkpointed state: claims by UID and, from v3, the health of GPUs by UUID.
type Data struct {
	Claims map[string]Claim  `json:"claims"`
	Health map[string]Health `json:"health,omitempty"`
}

// Clone returns a deep copy of d: changing the copy never changes d. Like a round trip through
// the file (the fields are omitempty), it turns empty slices into nil ones.
func (d Data) Clone() Data {
	out := Data{Claims: make(map[string]Claim, len(d.Claims))}
	for uid, c := range d.Claims {
		c.Devices = cloneDevices(c.Devices)
		c.MPS = cloneDaemons(c.MPS)
		out.Claims[uid] = c
	}
	if len(d.Health) > 0 {
		out.Health = make(map[string]Health, len(d.Health))
		for k, v := range d.Health {
			out.Health[k] = v
		}
	}
	return out
}

func cloneDaemons(ds []MPSDaemon) []MPSDaemon {
	if len(ds) == 0 {
		return nil
	}
	out := make([]MPSDaemon, len(ds))
	for i, d := range ds {
		d.Devices = cloneStrings(d.Devices)
		d.UUIDs = cloneStrings(d.UUIDs)
		d.ActiveThreadPercentage = clonePtr(d.ActiveThreadPercentage)
		if d.PinnedLimits != nil {
			m := make(map[string]string, len(d.PinnedLimits))
			for k, v := range d.PinnedLimits {
				m[k] = v
			}
			d.PinnedLimits = m
		}
		out[i] = d
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
		d.TimeSlice = clonePtr(d.TimeSlice)
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
	case "v1", "v2", "v3":
		if err := fieldsOf(version, d); err != nil {
			return nil, fmt.Errorf("checkpoint version %s: %w", version, err)
		}
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
	case "v1", "v2", "v3":
		dec := json.NewDecoder(bytes.NewReader(compact.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return Data{}, "", fmt.Errorf("%w: %s data: %w", ErrCorrupt, env.Version, err)
		}
		if err := fieldsOf(env.Version, d); err != nil {
			return Data{}, "", fmt.Errorf("%w: %s data: %w", ErrCorrupt, env.Version, err)
		}
	default:
		return Data{}, "", fmt.Errorf("%w: version %q unsupported, want one of %v", ErrCorrupt, env.Version, Versions)
	}
	if d.Claims == nil {
		d.Claims = map[string]Claim{}
	}
	return d, env.BootID, nil
}

// fieldsOf rejects data that uses fields the version does not have: Device.Env is v2, the
// sharing state and health v3.
func fieldsOf(version string, d Data) error {
	if version == "v3" {
		return nil
	}
	if len(d.Health) > 0 {
		return fmt.Errorf("health: field needs version v3")
	}
	for uid, c := range d.Claims {
		if len(c.MPS) > 0 {
			return fmt.Errorf("claims[%s].mps: field needs version v3", uid)
		}
		for i, dev := range c.Devices {
			if dev.TimeSlice != nil {
				return fmt.Errorf("claims[%s].devices[%d].timeSlice: field needs version v3", uid, i)
			}
			if len(dev.Env) > 0 && version == "v1" {
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
