// Package nvml is the driver's access to NVML through go-nvml: the real library or go-nvml's
// in-process mock servers, completed where the mocks are incomplete. It turns what NVML reports into
// the pure device model of package model, creates and destroys MIG instances (enforcing MIG
// constraints itself, since the mocks accept anything), and delivers health events.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/model"
)

// EnvBackend is the environment variable that selects the backend when no flag is given.
const EnvBackend = "NEURONETES_NVML"

// Options configure Open.
type Options struct {
	// StateFile, for mock backends only, persists the mock's MIG state so that it survives a restart
	// of the driver process like real hardware state would. Empty disables persistence.
	StateFile string
	// Seed, for mock backends only, makes GPU UUIDs differ between (simulated) nodes. UUIDs are a pure
	// function of the profile, the seed and the GPU index.
	Seed string
}

// Backend is an opened NVML library together with what the driver needs beside it. All MIG changes
// go through a Backend so they are serialized and, for mocks, persisted.
type Backend struct {
	// Name is the spec the backend was opened with, e.g. "mock:dgxh100" or "real".
	Name string
	// Lib is the NVML interface (real library or mock server).
	Lib gonvml.Interface

	mock *mockState // nil for the real library
	mu   sync.Mutex // serializes MIG changes
	// handles caches the real library's device handles by UUID (guarded by mu): a handle stays
	// valid until NVML is shut down. Mock handles are not cached: a refresh replaces them.
	handles  map[string]gonvml.Device
	events   chan Event
	shutdown func()
}

// Spec returns the backend spec from a flag value, falling back to $NEURONETES_NVML and then "real".
func Spec(flag string) string {
	if flag != "" {
		return flag
	}
	if v := os.Getenv(EnvBackend); v != "" {
		return v
	}
	return "real"
}

// Open opens a backend: "real" or "mock:<profile>" with profile one of MockProfiles().
func Open(spec string, opts Options) (*Backend, error) {
	b := &Backend{Name: spec, events: make(chan Event, 64)}
	switch {
	case spec == "real":
		lib := gonvml.New()
		if ret := lib.Init(); ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("nvml backend %q: init: %s", spec, gonvml.ErrorString(ret))
		}
		b.Lib = lib
		b.shutdown = func() { lib.Shutdown() }
	case strings.HasPrefix(spec, "mock:"):
		ms, err := newMock(strings.TrimPrefix(spec, "mock:"), opts)
		if err != nil {
			return nil, fmt.Errorf("nvml backend %q: %w", spec, err)
		}
		b.Lib = ms.server
		b.mock = ms
		b.shutdown = func() {}
	default:
		return nil, fmt.Errorf("nvml backend %q: want \"real\" or \"mock:<profile>\" with profile in %v", spec, MockProfiles())
	}
	return b, nil
}

// IsMock reports whether the backend is an in-process mock.
func (b *Backend) IsMock() bool { return b.mock != nil }

// Close releases the library.
func (b *Backend) Close() {
	if b.shutdown != nil {
		b.shutdown()
	}
}

// Inventory builds the device model of every GPU the backend reports, sorted by index. It is the
// only place that translates NVML into model.GPUInfo, so that slice generation can be run from a
// mock without starting a plugin.
func Inventory(ctx context.Context, b *Backend) ([]model.GPUInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inventoryLocked(ctx)
}

// refreshLocked picks up MIG changes another driver instance made to a persisted mock.
func (b *Backend) refreshLocked() error {
	if b.mock == nil {
		return nil
	}
	if err := b.mock.refresh(); err != nil {
		return fmt.Errorf("mock state: %w", err)
	}
	return nil
}

func (b *Backend) inventoryLocked(ctx context.Context) ([]model.GPUInfo, error) {
	if err := b.refreshLocked(); err != nil {
		return nil, err
	}
	n, ret := b.Lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("device count: %s", gonvml.ErrorString(ret))
	}
	driverVersion, ret := b.Lib.SystemGetDriverVersion()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("driver version: %s", gonvml.ErrorString(ret))
	}
	cudaVersion := ""
	if v, ret := b.Lib.SystemGetCudaDriverVersion(); ret == gonvml.SUCCESS && v > 0 {
		cudaVersion = fmt.Sprintf("%d.%d.0", v/1000, v%1000/10)
	}
	gpus := make([]model.GPUInfo, 0, n)
	devs := make([]gonvml.Device, 0, n)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, ret := b.Lib.DeviceGetHandleByIndex(i)
		if ret == gonvml.ERROR_GPU_IS_LOST {
			klog.FromContext(ctx).Error(nil, "GPU is lost, left out of the inventory", "index", i)
			continue
		}
		if ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("device %d: handle: %s", i, gonvml.ErrorString(ret))
		}
		g, err := b.describe(i, d, driverVersion)
		if err != nil {
			if _, ret := d.GetMemoryInfo(); ret == gonvml.ERROR_GPU_IS_LOST {
				klog.FromContext(ctx).Error(err, "GPU is lost, left out of the inventory", "index", i)
				continue
			}
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		g.CUDADriverVersion = cudaVersion
		gpus = append(gpus, g)
		devs = append(devs, d)
	}
	assignNVLinkDomains(gpus, devs)
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	return gpus, nil
}

func (b *Backend) describe(i int, d gonvml.Device, driverVersion string) (model.GPUInfo, error) {
	g := model.GPUInfo{Index: i, NUMANode: -1, DriverVersion: semver(driverVersion)}
	var ret gonvml.Return
	if g.UUID, ret = d.GetUUID(); ret != gonvml.SUCCESS {
		return g, fmt.Errorf("uuid: %s", gonvml.ErrorString(ret))
	}
	if g.Minor, ret = d.GetMinorNumber(); ret != gonvml.SUCCESS {
		g.Minor = i
	}
	if g.ProductName, ret = d.GetName(); ret != gonvml.SUCCESS {
		return g, fmt.Errorf("name: %s", gonvml.ErrorString(ret))
	}
	if brand, ret := d.GetBrand(); ret == gonvml.SUCCESS {
		g.Brand = brandName(brand)
	}
	if arch, ret := d.GetArchitecture(); ret == gonvml.SUCCESS {
		g.Architecture = archName(arch)
	}
	if maj, mnr, ret := d.GetCudaComputeCapability(); ret == gonvml.SUCCESS {
		g.CUDAComputeCapability = fmt.Sprintf("%d.%d.0", maj, mnr)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return g, fmt.Errorf("memory: %s", gonvml.ErrorString(ret))
	}
	g.MemoryBytes = mem.Total
	if pci, ret := d.GetPciInfo(); ret == gonvml.SUCCESS {
		g.PCIBusID = normalizeBusID(int8String(pci.BusId[:]))
	}
	g.PCIeRoot, g.NUMANode = b.pciePlacement(d, g.PCIBusID)
	if err := describeMIG(d, &g, func(id int) string { return b.profileName(d, id) }); err != nil {
		return g, err
	}
	return g, nil
}

// device returns the NVML handle of the GPU with the given UUID. The caller holds mu.
func (b *Backend) device(uuid string) (gonvml.Device, error) {
	if d, ok := b.handles[uuid]; ok {
		return d, nil
	}
	d, ret := b.Lib.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("gpu %s: %s", uuid, gonvml.ErrorString(ret))
	}
	if b.mock == nil {
		if b.handles == nil {
			b.handles = map[string]gonvml.Device{}
		}
		b.handles[uuid] = d
	}
	return d, nil
}

// ErrNotFound reports that a MIG instance does not exist (any more).
var ErrNotFound = errors.New("not found")

func semver(v string) string {
	parts := strings.Split(v, ".")
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		p = strings.TrimLeft(p, "0")
		if p == "" {
			p = "0"
		}
		parts[i] = p
	}
	return strings.Join(parts[:3], ".")
}

func int8String(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// normalizeBusID turns NVML's "00000000:18:00.0" into the sysfs form "0000:18:00.0".
func normalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	if id == "" {
		return ""
	}
	dom, rest, ok := strings.Cut(id, ":")
	if !ok {
		return id
	}
	if len(dom) > 4 {
		dom = dom[len(dom)-4:]
	}
	return dom + ":" + rest
}

func brandName(b gonvml.BrandType) string {
	switch b {
	case gonvml.BRAND_NVIDIA:
		return "nvidia"
	case gonvml.BRAND_TESLA:
		return "tesla"
	case gonvml.BRAND_QUADRO:
		return "quadro"
	case gonvml.BRAND_GEFORCE:
		return "geforce"
	case gonvml.BRAND_NVIDIA_RTX:
		return "nvidia-rtx"
	case gonvml.BRAND_TITAN:
		return "titan"
	case gonvml.BRAND_QUADRO_RTX:
		return "quadro-rtx"
	case gonvml.BRAND_GEFORCE_RTX:
		return "geforce-rtx"
	case gonvml.BRAND_TITAN_RTX:
		return "titan-rtx"
	default:
		return fmt.Sprintf("brand-%d", int(b))
	}
}

func archName(a gonvml.DeviceArchitecture) string {
	switch a {
	case gonvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case gonvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case gonvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case gonvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case gonvml.DEVICE_ARCH_TURING:
		return "turing"
	case gonvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case gonvml.DEVICE_ARCH_ADA:
		return "ada"
	case gonvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case gonvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	default:
		return fmt.Sprintf("arch-%d", int(a))
	}
}
