package slices

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/neuronetes/neuronetes/driver/model"
)

// Attributes and capacities published only in NVIDIA compatibility mode (Options.Compat), named
// as NVIDIA's DRA driver names them.
const (
	AttrCUDADriverVersion = "cudaDriverVersion"
	CapCopyEngines        = "copyEngines"
	CapDecoders           = "decoders"
	CapEncoders           = "encoders"
	CapJPEGEngines        = "jpegEngines"
	CapOFAEngines         = "ofaEngines"

	// AttrImplementation marks the whole GPUs and static MIG devices NeuroNetes publishes under
	// NVIDIA's driver name, so that a starting driver can tell its own slices from those of
	// NVIDIA's driver (which never publishes it); Implementation is its value.
	AttrImplementation resourceapi.QualifiedName = "neuronetes.io/implementation"
	Implementation                               = "neuronetes"
)

// nvidiaBrands and nvidiaArchitectures spell NVML's brands and architectures as NVIDIA's driver
// publishes them (go-nvlib's names), keyed by the model's lower-case names.
var (
	nvidiaBrands = map[string]string{
		"nvidia": "Nvidia", "tesla": "Tesla", "quadro": "Quadro", "geforce": "GeForce", "titan": "Titan",
		"nvidia-rtx": "NvidiaRTX", "quadro-rtx": "QuadroRTX", "geforce-rtx": "GeForceRTX", "titan-rtx": "TitanRTX",
	}
	nvidiaArchitectures = map[string]string{
		"kepler": "Kepler", "maxwell": "Maxwell", "pascal": "Pascal", "volta": "Volta", "turing": "Turing",
		"ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper", "blackwell": "Blackwell",
	}
)

// NVIDIABrand returns NVIDIA's spelling of a brand ("nvidia" is "Nvidia"); unknown names are kept.
func NVIDIABrand(b string) string {
	if n, ok := nvidiaBrands[b]; ok {
		return n
	}
	return b
}

// NVIDIAArchitecture returns NVIDIA's spelling of an architecture ("ada" is "Ada Lovelace").
func NVIDIAArchitecture(a string) string {
	if n, ok := nvidiaArchitectures[a]; ok {
		return n
	}
	return a
}

// addCompatAttributes respells brand and architecture as NVIDIA does and adds the CUDA driver
// version.
func addCompatAttributes(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, g *model.GPUInfo) {
	if g.Brand != "" {
		a[AttrBrand] = str(NVIDIABrand(g.Brand))
	}
	if g.Architecture != "" {
		a[AttrArchitecture] = str(NVIDIAArchitecture(g.Architecture))
	}
	if g.CUDADriverVersion != "" {
		a[AttrCUDADriverVersion] = ver(g.CUDADriverVersion)
	}
}
