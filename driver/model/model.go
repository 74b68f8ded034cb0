// Package model is the driver's device model: a pure description of the GPUs of one node, their MIG
// profiles, placements and existing MIG instances. It imports neither NVML nor Kubernetes clients, so
// slice generation and MIG arithmetic can be run and tested anywhere (including the scale simulator).
package model

import (
	"fmt"
	"math"
	"strings"
)

// DriverName is the DRA driver name, also used as the attribute domain.
const DriverName = "gpu.neuronetes.io"

// CompatDriverName is the driver name (and attribute domain) of NVIDIA's DRA driver, which
// NeuroNetes takes in NVIDIA compatibility mode.
const CompatDriverName = "gpu.nvidia.com"

// GPUInfo describes one physical GPU as discovered through NVML.
type GPUInfo struct {
	// Index is the NVML device index; device names are derived from it.
	Index int `json:"index"`
	// Minor is the /dev/nvidia<Minor> device node number.
	Minor int `json:"minor"`
	// UUID is the NVML UUID ("GPU-...").
	UUID string `json:"uuid"`
	// ProductName is the marketing name, e.g. "NVIDIA H100 80GB HBM3".
	ProductName string `json:"productName"`
	// Brand is the NVML brand in lower case, e.g. "nvidia".
	Brand string `json:"brand"`
	// Architecture is the NVML architecture in lower case, e.g. "hopper".
	Architecture string `json:"architecture"`
	// CUDAComputeCapability is "major.minor.0", a semantic version.
	CUDAComputeCapability string `json:"cudaComputeCapability"`
	// DriverVersion is the kernel driver version as a semantic version, e.g. "550.54.15".
	DriverVersion string `json:"driverVersion"`
	// CUDADriverVersion is the CUDA version the driver supports as a semantic version, e.g.
	// "12.4.0"; empty if unknown.
	CUDADriverVersion string `json:"cudaDriverVersion,omitempty"`
	// MemoryBytes is the total framebuffer memory.
	MemoryBytes uint64 `json:"memoryBytes"`
	// Multiprocessors is the SM count of the whole GPU.
	Multiprocessors int `json:"multiprocessors"`
	// PCIBusID is the normalized PCI address "dddd:bb:dd.f" (lower case), empty if unknown.
	PCIBusID string `json:"pciBusID,omitempty"`
	// PCIeRoot is the PCIe root complex ("pci0000:00"), empty if unknown.
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// NUMANode is the NUMA node, or -1 when the GPU has no NUMA affinity.
	NUMANode int `json:"numaNode"`
	// NVLinkDomain is shared by GPUs that are fully NVLinked to each other; empty when the GPU has no
	// NVLink peer.
	NVLinkDomain string `json:"nvlinkDomain,omitempty"`
	// MIGCapable reports whether the GPU supports MIG.
	MIGCapable bool `json:"migCapable"`
	// MIGEnabled reports whether MIG mode is currently on.
	MIGEnabled bool `json:"migEnabled"`
	// MIGProfiles lists the GPU instance profiles with their possible placements, sorted by ID.
	MIGProfiles []MIGProfile `json:"migProfiles,omitempty"`
	// MIGInstances lists the MIG instances that exist on the GPU.
	MIGInstances []MIGInstance `json:"migInstances,omitempty"`
}

// MIGProfile is one GPU instance profile (with its full-size compute instance).
type MIGProfile struct {
	// ID is the NVML GPU instance profile id.
	ID int `json:"id"`
	// Name is the profile name as NVML reports it, without its "MIG " prefix, e.g. "1g.10gb" or
	// "1g.10gb+me" (ProfileName where NVML reports none).
	Name string `json:"name"`
	// ComputeSlices is the number of compute (GPC) slices the profile takes.
	ComputeSlices int `json:"computeSlices"`
	// MemoryBytes is the memory of one instance.
	MemoryBytes uint64 `json:"memoryBytes"`
	// Multiprocessors is the SM count of one instance.
	Multiprocessors int `json:"multiprocessors"`
	// MaxInstances is the number of instances of this profile that fit on the GPU.
	MaxInstances int `json:"maxInstances"`
	// Engines counts the copy engines, decoders, encoders, JPEG and OFA units of one instance.
	CopyEngines int `json:"copyEngines"`
	Decoders    int `json:"decoders"`
	Encoders    int `json:"encoders"`
	JPEGs       int `json:"jpegs"`
	OFAs        int `json:"ofas"`
	// Placements lists the memory-slot ranges an instance may occupy.
	Placements []Placement `json:"placements"`
}

// Placement is a range [Start, Start+Size) of memory slots.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Overlaps reports whether two placements share a memory slot.
func (p Placement) Overlaps(o Placement) bool {
	return p.Start < o.Start+o.Size && o.Start < p.Start+p.Size
}

// MIGInstance is an existing MIG device (GPU instance plus one compute instance).
type MIGInstance struct {
	ProfileID int       `json:"profileID"`
	GIID      int       `json:"giID"`
	CIID      int       `json:"ciID"`
	Placement Placement `json:"placement"`
	// UUID is the MIG device UUID ("MIG-...").
	UUID string `json:"uuid"`
}

// Profile returns the profile with the given NVML id.
func (g *GPUInfo) Profile(id int) (MIGProfile, bool) {
	for _, p := range g.MIGProfiles {
		if p.ID == id {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// ProfileByName returns the profile with the given canonical name.
func (g *GPUInfo) ProfileByName(name string) (MIGProfile, bool) {
	for _, p := range g.MIGProfiles {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// ProfileName is the fallback for a MIG profile's name where NVML reports none (older drivers,
// mocks): "<slices>g.<GB>gb" plus suffix ("+me", "-me", "+me.all", "+gfx"). NVIDIA names a
// profile by its share of the GPU's memory in eighths, times the GPU's memory in GB rounded up:
// the real H200's 1g instance has 16 GiB of 140.4 GiB, about one eighth of 141 GB, hence
// "1g.18gb"; the A100-40GB's 7g instance has 39.25 GiB, hence "7g.40gb". With gpuMemoryBytes 0
// (unknown) the instance's own memory in GiB, rounded up, is used.
func ProfileName(computeSlices int, memoryBytes, gpuMemoryBytes uint64, suffix string) string {
	gb := (memoryBytes + (1 << 30) - 1) >> 30
	if gpuMemoryBytes > 0 {
		gpuGB := float64((gpuMemoryBytes + (1 << 30) - 1) >> 30)
		eighths := max(math.Round(float64(memoryBytes)/float64(gpuMemoryBytes)*8), 1)
		gb = uint64(math.Round(eighths / 8 * gpuGB))
	}
	return fmt.Sprintf("%dg.%dgb%s", computeSlices, gb, suffix)
}

// NVMLProfileName turns the name NVML reports for a GPU instance profile ("MIG 1g.18gb") into
// the canonical profile name ("1g.18gb"); "" when NVML reported none.
func NVMLProfileName(reported string) string {
	n := strings.TrimSpace(reported)
	n = strings.TrimSpace(strings.TrimPrefix(n, "MIG"))
	return n
}

// NameToken turns a profile name into a token usable in device names (no dots, no plus signs).
func NameToken(profile string) string {
	return strings.NewReplacer(".", "-", "+", "-").Replace(profile)
}

// WholeGPUName is the device name of a whole GPU.
func WholeGPUName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// DynamicMIGName is the device name of a partitionable MIG device (profile and placement start).
func DynamicMIGName(index int, profile string, start int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-p%d", index, NameToken(profile), start)
}

// StaticMIGName is the device name of an existing MIG instance.
func StaticMIGName(index, giID, ciID int) string {
	return fmt.Sprintf("gpu-%d-mig-%d-%d", index, giID, ciID)
}

// CounterSetName is the name of the counter set of one GPU.
func CounterSetName(index int) string { return fmt.Sprintf("gpu-%d-counters", index) }
