// Package cdi writes one CDI spec per prepared claim (tags.cncf.io/container-device-interface).
// Each prepared device becomes a CDI device carrying its device nodes (only those that exist on the
// host), its mounts, its UUID and a description of the device; a claim-wide CDI device sets
// NVIDIA_VISIBLE_DEVICES to every UUID of the claim, the variable NVIDIA's container runtime and
// CUDA read.
package cdi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Vendor and Class form the CDI kind of the driver's specs (NewWriter's default vendor).
const (
	Vendor = "k8s.gpu.neuronetes.io"
	Class  = "claim"
	// VisibleDevicesEnv is the variable NVIDIA containers read for the GPUs to use.
	VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
)

// Device describes one prepared device for the CDI spec.
type Device struct {
	// Name is the published device name (e.g. "gpu-0").
	Name string
	// UUID is the GPU or MIG device UUID.
	UUID string
	// DeviceNodes are host paths (e.g. /dev/nvidia0) the container needs; missing ones are skipped.
	DeviceNodes []string
	// Env is extra environment for the container (opaque config).
	Env []string
	// Mounts are host directories bind-mounted into the container (MPS pipe and log).
	Mounts []Mount
	// Description, when set, is given to the container as DescriptionEnv(Name), so that tools
	// inside it can list what they received without a GPU driver (the e2e nvidia-smi stand-in).
	Description *Description
}

// Mount is a host directory bind-mounted into the container.
type Mount struct {
	HostPath, ContainerPath string
}

// Description describes a device to tools inside the container (JSON in DescriptionEnv).
type Description struct {
	// Index and ProductName describe the (parent) GPU; UUID is the GPU's UUID.
	Index       int    `json:"index"`
	ProductName string `json:"productName"`
	UUID        string `json:"uuid"`
	// MIGUUID and Profile are set for MIG devices.
	MIGUUID string `json:"migUUID,omitempty"`
	Profile string `json:"profile,omitempty"`
}

// DescriptionPrefix starts the name of every description variable: DescriptionPrefix + the device
// name in upper case with "-" and "." turned into "_" + "_DESC".
const DescriptionPrefix = "NEURONETES_DEVICE_"

// DescriptionEnv is the name of the variable that describes a device.
func DescriptionEnv(device string) string { return DescriptionPrefix + envName(device) + "_DESC" }

// Writer writes and removes claim specs in one directory.
type Writer struct {
	dir    string
	vendor string
	cache  *cdiapi.Cache
	// DevRoot prefixes device node paths when checking that they exist (tests); "" is "/".
	DevRoot string
}

// NewWriter returns a writer for the spec directory (e.g. /var/run/cdi), creating it, with the
// default vendor.
func NewWriter(dir string) (*Writer, error) { return NewWriterFor(dir, Vendor) }

// NewWriterFor returns a writer whose specs have the CDI kind <vendor>/claim (e.g.
// "k8s.gpu.nvidia.com" in NVIDIA compatibility mode).
func NewWriterFor(dir, vendor string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cdi dir %s: %w", dir, err)
	}
	c, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("cdi cache %s: %w", dir, err)
	}
	return &Writer{dir: dir, vendor: vendor, cache: c}, nil
}

// CommonDeviceNodes are the control nodes every GPU container needs, where they exist.
var CommonDeviceNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

func (w *Writer) exists(path string) bool {
	_, err := os.Stat(filepath.Join(w.DevRoot, path))
	return err == nil
}

func (w *Writer) specName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(w.vendor, Class, claimUID)
}

// DeviceID returns the fully qualified CDI id of a device of a claim.
func (w *Writer) DeviceID(claimUID, device string) string {
	return parser.QualifiedName(w.vendor, Class, claimUID+"-"+device)
}

// ClaimDeviceID returns the CDI id of the claim-wide device.
func (w *Writer) ClaimDeviceID(claimUID string) string {
	return parser.QualifiedName(w.vendor, Class, claimUID)
}

// Write writes (or replaces) the spec of a claim and returns, per device, the CDI ids to hand to the
// kubelet. The claim-wide device is attached to the first device.
func (w *Writer) Write(claimUID string, devices []Device) ([][]string, error) {
	spec := &cdispec.Spec{Kind: w.vendor + "/" + Class}
	var uuids []string
	ids := make([][]string, len(devices))
	for i, d := range devices {
		edits := cdispec.ContainerEdits{Env: append([]string{DescriptionPrefix + envName(d.Name) + "=" + d.UUID}, d.Env...)}
		if d.Description != nil {
			raw, err := json.Marshal(d.Description)
			if err != nil {
				return nil, fmt.Errorf("cdi spec of claim %s: device %s: %w", claimUID, d.Name, err)
			}
			edits.Env = append(edits.Env, DescriptionEnv(d.Name)+"="+string(raw))
		}
		for _, n := range d.DeviceNodes {
			if w.exists(n) {
				edits.DeviceNodes = append(edits.DeviceNodes, &cdispec.DeviceNode{Path: n})
			}
		}
		for _, m := range d.Mounts {
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: []string{"rw", "nosuid", "nodev", "bind"}})
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: claimUID + "-" + d.Name, ContainerEdits: edits})
		ids[i] = []string{w.DeviceID(claimUID, d.Name)}
		if d.UUID != "" {
			uuids = append(uuids, d.UUID)
		}
	}
	claimEdits := cdispec.ContainerEdits{Env: []string{VisibleDevicesEnv + "=" + strings.Join(uuids, ",")}}
	for _, n := range CommonDeviceNodes {
		if w.exists(n) {
			claimEdits.DeviceNodes = append(claimEdits.DeviceNodes, &cdispec.DeviceNode{Path: n})
		}
	}
	spec.Devices = append(spec.Devices, cdispec.Device{Name: claimUID, ContainerEdits: claimEdits})
	if len(ids) > 0 {
		ids[0] = append(ids[0], w.ClaimDeviceID(claimUID))
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("cdi spec of claim %s: version: %w", claimUID, err)
	}
	spec.Version = v
	if err := w.cache.WriteSpec(spec, w.specName(claimUID)+".json"); err != nil {
		return nil, fmt.Errorf("cdi spec of claim %s: write: %w", claimUID, err)
	}
	return ids, nil
}

// Remove deletes the spec of a claim; a missing spec is not an error.
func (w *Writer) Remove(claimUID string) error {
	if err := w.cache.RemoveSpec(w.specName(claimUID) + ".json"); err != nil {
		return fmt.Errorf("cdi spec of claim %s: remove: %w", claimUID, err)
	}
	return nil
}

// Path returns the spec file of a claim.
func (w *Writer) Path(claimUID string) string {
	return filepath.Join(w.dir, w.specName(claimUID)+".json")
}

func envName(s string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(s))
}

// ClaimUIDs lists the claims that have a spec in the directory.
func (w *Writer) ClaimUIDs() ([]string, error) {
	prefix := w.specName("")
	matches, err := filepath.Glob(filepath.Join(w.dir, prefix+"*.json"))
	if err != nil {
		return nil, fmt.Errorf("cdi dir %s: %w", w.dir, err)
	}
	out := make([]string, 0, len(matches))
	for _, m := range matches {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), prefix), ".json"))
	}
	return out, nil
}
