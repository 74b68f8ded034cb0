package nvml

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
	"k8s.io/klog/v2"
)

// mockProfile describes a simulated machine: its GPUs and how they are NVLinked.
type mockProfile struct {
	gpus          []gpus.Config
	driverVersion string
	cudaVersion   int
	// topology is "nvswitch" (all GPUs on the same NVSwitches), "pairs" (GPU 2k linked only to
	// 2k+1) or "" (no NVLink).
	topology string
}

// l40s is a GPU without MIG support, to exercise whole-GPU-only publishing.
var l40s = gpus.Config{
	Name:         "NVIDIA L40S",
	Architecture: gonvml.DEVICE_ARCH_ADA,
	Brand:        gonvml.BRAND_NVIDIA,
	MemoryMB:     46068,
	CudaMajor:    8,
	CudaMinor:    9,
	PciDeviceId:  0x26b910de,
}

var mockProfiles = map[string]mockProfile{
	"dgxa100":      {gpus: gpus.Multiple(8, gpus.A100_SXM4_40GB), driverVersion: "550.54.15", cudaVersion: 12040, topology: "nvswitch"},
	"dgxh100":      {gpus: gpus.Multiple(8, gpus.H100_SXM5_80GB), driverVersion: "550.54.15", cudaVersion: 12040, topology: "nvswitch"},
	"dgxh200":      {gpus: gpus.Multiple(8, gpus.H200_SXM5_141GB), driverVersion: "550.54.15", cudaVersion: 12040, topology: "nvswitch"},
	"dgxb200":      {gpus: gpus.Multiple(8, gpus.B200_SXM5_180GB), driverVersion: "560.28.03", cudaVersion: 12060, topology: "nvswitch"},
	"nvlink-pairs": {gpus: gpus.Multiple(8, gpus.H100_SXM5_80GB), driverVersion: "550.54.15", cudaVersion: 12040, topology: "pairs"},
	"mixed":        {gpus: append(gpus.Multiple(2, gpus.H100_SXM5_80GB), l40s, l40s), driverVersion: "550.54.15", cudaVersion: 12040},
}

// mockProfileNames are the GPU instance profile names real NVML reports for the mocked GPU models
// (NVIDIA's MIG user guide), by model name and profile id: go-nvml's mock does not implement the
// versioned profile info that carries them.
var mockProfileNames = map[string]map[int]string{
	gpus.A100_SXM4_40GB.Name: {
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE: "1g.5gb", gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: "1g.5gb+me",
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: "1g.10gb", gonvml.GPU_INSTANCE_PROFILE_2_SLICE: "2g.10gb",
		gonvml.GPU_INSTANCE_PROFILE_3_SLICE: "3g.20gb", gonvml.GPU_INSTANCE_PROFILE_4_SLICE: "4g.20gb",
		gonvml.GPU_INSTANCE_PROFILE_7_SLICE: "7g.40gb",
	},
	gpus.H100_SXM5_80GB.Name: {
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE: "1g.10gb", gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: "1g.10gb+me",
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: "1g.20gb", gonvml.GPU_INSTANCE_PROFILE_2_SLICE: "2g.20gb",
		gonvml.GPU_INSTANCE_PROFILE_3_SLICE: "3g.40gb", gonvml.GPU_INSTANCE_PROFILE_4_SLICE: "4g.40gb",
		gonvml.GPU_INSTANCE_PROFILE_7_SLICE: "7g.80gb",
	},
	gpus.H200_SXM5_141GB.Name: {
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE: "1g.18gb", gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: "1g.18gb+me",
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: "1g.35gb", gonvml.GPU_INSTANCE_PROFILE_2_SLICE: "2g.35gb",
		gonvml.GPU_INSTANCE_PROFILE_3_SLICE: "3g.71gb", gonvml.GPU_INSTANCE_PROFILE_4_SLICE: "4g.71gb",
		gonvml.GPU_INSTANCE_PROFILE_7_SLICE: "7g.141gb",
	},
	gpus.B200_SXM5_180GB.Name: {
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE: "1g.23gb", gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: "1g.23gb+me",
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: "1g.45gb", gonvml.GPU_INSTANCE_PROFILE_2_SLICE: "2g.45gb",
		gonvml.GPU_INSTANCE_PROFILE_3_SLICE: "3g.90gb", gonvml.GPU_INSTANCE_PROFILE_4_SLICE: "4g.90gb",
		gonvml.GPU_INSTANCE_PROFILE_7_SLICE: "7g.180gb",
	},
}

// MockProfiles lists the mock machine profiles accepted as "mock:<profile>".
func MockProfiles() []string {
	out := make([]string, 0, len(mockProfiles))
	for k := range mockProfiles {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Bus numbers of the eight GPU slots of a DGX-like machine; GPUs 0-3 hang off NUMA node 0.
var mockBuses = []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

const mockLinks = 18 // NVLinks per GPU, as on H100
const mockSwitches = 4

type mockState struct {
	profile string
	server  *server.Server
	file    string
	numa    map[string]int
	root    map[string]string
	// seen identifies the state file version this process last wrote or read; another process
	// (a second driver instance during a rolling update) changing the file makes refresh reload.
	seen fileVersion
	// lost are the GPUs (by UUID) that do not answer Probe (SetLost).
	lost map[string]bool
}

type fileVersion struct {
	mtime int64
	size  int64
}

func stateVersion(path string) fileVersion {
	st, err := os.Stat(path)
	if err != nil {
		return fileVersion{}
	}
	return fileVersion{st.ModTime().UnixNano(), st.Size()}
}

// refresh reloads the persisted MIG state when another process changed it since we last saw it.
func (m *mockState) refresh() error {
	if m.file == "" || stateVersion(m.file) == m.seen {
		return nil
	}
	m.reset()
	return m.load()
}

func newMock(name string, opts Options) (*mockState, error) {
	prof, ok := mockProfiles[name]
	if !ok {
		return nil, fmt.Errorf("unknown mock profile %q, want one of %v", name, MockProfiles())
	}
	srv, err := server.New(
		server.WithGPUs(prof.gpus...),
		server.WithDriverVersion(prof.driverVersion),
		server.WithNVMLVersion("12."+prof.driverVersion),
		server.WithCUDADriverVersion(prof.cudaVersion),
	)
	if err != nil {
		return nil, fmt.Errorf("mock server: %w", err)
	}
	ms := &mockState{profile: name, server: srv, file: opts.StateFile, numa: map[string]int{}, root: map[string]string{}, lost: map[string]bool{}}
	devs := make([]*server.Device, len(srv.Devices))
	for i, d := range srv.Devices {
		devs[i] = d.(*server.Device)
	}
	for i, d := range devs {
		bus := 0x10 + i
		if i < len(mockBuses) {
			bus = mockBuses[i]
		}
		d.PciBusID = fmt.Sprintf("0000:%02x:00.0", bus)
		d.UUID = "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("neuronetes/%s/%s/%d", name, opts.Seed, i))).String()
		ms.numa[d.PciBusID] = i * 2 / max(len(devs), 1)
		ms.root[d.PciBusID] = fmt.Sprintf("pci0000:%02x", bus-1)
		completeDevice(d, devs, i, prof.topology)
	}
	if ms.file != "" {
		if err := ms.load(); err != nil {
			return nil, fmt.Errorf("mock state %s: %w", ms.file, err)
		}
	}
	return ms, nil
}

func setBusID(dst *[32]int8, bus string) {
	for i := range dst {
		dst[i] = 0
	}
	for i := 0; i < len(bus) && i < len(dst)-1; i++ {
		dst[i] = int8(bus[i])
	}
}

// completeDevice fills in the mock functions that go-nvml leaves nil (they panic when called):
// PCI bus id, NUMA node and NVLink topology. It also makes GPU instance creation refuse what the
// hardware refuses (a placement the profile does not have, one that overlaps an instance), which
// go-nvml's mock accepts.
func completeDevice(d *server.Device, all []*server.Device, i int, topology string) {
	create := d.CreateGpuInstanceWithPlacementFunc
	d.CreateGpuInstanceWithPlacementFunc = func(info *gonvml.GpuInstanceProfileInfo, pl *gonvml.GpuInstancePlacement) (gonvml.GpuInstance, gonvml.Return) {
		if ret := checkMockPlacement(d, info, pl); ret != gonvml.SUCCESS {
			return nil, ret
		}
		return create(info, pl)
	}
	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		p := gonvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Domain: 0, Bus: uint32(mockBuses[i%len(mockBuses)])}
		setBusID(&p.BusId, "0000"+d.PciBusID)
		return p, gonvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, gonvml.Return) { return i * 2 / len(all), gonvml.SUCCESS }
	peer := func(link int) (int, bool) {
		switch topology {
		case "pairs":
			if link < 4 && i^1 < len(all) {
				return i ^ 1, true
			}
		}
		return 0, false
	}
	active := func(link int) bool {
		switch topology {
		case "nvswitch":
			return link < mockLinks
		case "pairs":
			_, ok := peer(link)
			return ok
		}
		return false
	}
	d.GetNvLinkStateFunc = func(link int) (gonvml.EnableState, gonvml.Return) {
		if link < 0 || link >= mockLinks {
			return 0, gonvml.ERROR_INVALID_ARGUMENT
		}
		if active(link) {
			return gonvml.FEATURE_ENABLED, gonvml.SUCCESS
		}
		return gonvml.FEATURE_DISABLED, gonvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (gonvml.IntNvLinkDeviceType, gonvml.Return) {
		if !active(link) {
			return gonvml.NVLINK_DEVICE_TYPE_UNKNOWN, gonvml.ERROR_NOT_SUPPORTED
		}
		if topology == "nvswitch" {
			return gonvml.NVLINK_DEVICE_TYPE_SWITCH, gonvml.SUCCESS
		}
		return gonvml.NVLINK_DEVICE_TYPE_GPU, gonvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (gonvml.PciInfo, gonvml.Return) {
		if !active(link) {
			return gonvml.PciInfo{}, gonvml.ERROR_NOT_SUPPORTED
		}
		var p gonvml.PciInfo
		if topology == "nvswitch" {
			setBusID(&p.BusId, fmt.Sprintf("00000000:%02x:00.0", 0xc0+link%mockSwitches))
		} else if j, ok := peer(link); ok {
			setBusID(&p.BusId, "0000"+all[j].PciBusID)
		}
		return p, gonvml.SUCCESS
	}
}

// checkMockPlacement returns what real NVML returns for an impossible placement: an invalid
// argument for a placement the profile does not offer, insufficient resources for an overlap.
func checkMockPlacement(d *server.Device, info *gonvml.GpuInstanceProfileInfo, pl *gonvml.GpuInstancePlacement) gonvml.Return {
	valid := false
	for _, p := range d.Config.MIGProfiles.GpuInstancePlacements[int(info.Id)] {
		valid = valid || (p.Start == pl.Start && p.Size == pl.Size)
	}
	if !valid {
		return gonvml.ERROR_INVALID_ARGUMENT
	}
	d.RLock()
	defer d.RUnlock()
	for gi := range d.GpuInstances {
		o := gi.Info.Placement
		if pl.Start < o.Start+o.Size && o.Start < pl.Start+pl.Size {
			return gonvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	return gonvml.SUCCESS
}

func (m *mockState) numaNode(bus string) int {
	if n, ok := m.numa[bus]; ok {
		return n
	}
	return -1
}

func (m *mockState) pcieRoot(bus string) string { return m.root[bus] }

func mockMIGUUID(gpuUUID string, giID, ciID int) string {
	return "MIG-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("%s/%d/%d", gpuUUID, giID, ciID))).String()
}

// persisted is the on-disk form of the mock's MIG state, which stands in for hardware state that
// outlives the driver process.
type persisted struct {
	Profile string         `json:"profile"`
	GPUs    []persistedGPU `json:"gpus"`
	// Lost are the UUIDs of GPUs that do not answer (SetLost): a lost GPU stays lost when the
	// driver restarts.
	Lost []string `json:"lost,omitempty"`
}

type persistedGPU struct {
	MIGMode   int                 `json:"migMode"`
	Next      uint32              `json:"nextGI"`
	Instances []persistedInstance `json:"instances,omitempty"`
}

type persistedInstance struct {
	ProfileID int    `json:"profileID"`
	GIID      uint32 `json:"giID"`
	Start     uint32 `json:"start"`
	Size      uint32 `json:"size"`
	CIProfile []int  `json:"ciProfiles"`
}

func (b *Backend) saveMock(ctx context.Context) {
	if b.mock == nil || b.mock.file == "" {
		return
	}
	if err := b.mock.save(); err != nil {
		klog.FromContext(ctx).Error(err, "Saving mock NVML state failed", "file", b.mock.file)
	}
}

func (m *mockState) save() error {
	st := persisted{Profile: m.profile}
	for u := range m.lost {
		st.Lost = append(st.Lost, u)
	}
	sort.Strings(st.Lost)
	for _, dv := range m.server.Devices {
		d := dv.(*server.Device)
		d.RLock()
		pg := persistedGPU{MIGMode: d.MigMode, Next: d.GpuInstanceCounter}
		for gi := range d.GpuInstances {
			in := persistedInstance{ProfileID: int(gi.Info.ProfileId), GIID: gi.Info.Id, Start: gi.Info.Placement.Start, Size: gi.Info.Placement.Size}
			gi.RLock()
			for ci := range gi.ComputeInstances {
				in.CIProfile = append(in.CIProfile, int(ci.Info.ProfileId))
			}
			gi.RUnlock()
			pg.Instances = append(pg.Instances, in)
		}
		d.RUnlock()
		sort.Slice(pg.Instances, func(i, j int) bool { return pg.Instances[i].GIID < pg.Instances[j].GIID })
		st.GPUs = append(st.GPUs, pg)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.file), 0o755); err != nil {
		return err
	}
	tmp := m.file + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, m.file); err != nil {
		return err
	}
	m.seen = stateVersion(m.file)
	return nil
}

// load reads the persisted MIG state. A file that cannot be applied (it names a profile or
// placement the GPU does not have, or overlapping instances) is moved aside to <file>.corrupt and
// the machine starts clean, as after a reset: a bad file must not crash-loop the driver.
func (m *mockState) load() error {
	m.seen = stateVersion(m.file)
	raw, err := os.ReadFile(m.file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var st persisted
	err = json.Unmarshal(raw, &st)
	if err == nil {
		if st.Profile != m.profile || len(st.GPUs) != len(m.server.Devices) {
			return nil // another profile: start from a clean machine
		}
		err = m.apply(st)
		for _, u := range st.Lost {
			m.lost[u] = true
		}
	}
	if err == nil {
		return nil
	}
	m.reset()
	klog.Background().Error(err, "Mock NVML state file is inconsistent; moving it aside and starting clean", "file", m.file)
	if rerr := os.Rename(m.file, m.file+".corrupt"); rerr != nil {
		return fmt.Errorf("inconsistent state (%v) cannot be moved aside: %w", err, rerr)
	}
	m.seen = stateVersion(m.file)
	return nil
}

// apply recreates the persisted instances, checking every NVML return code.
func (m *mockState) apply(st persisted) error {
	for i, pg := range st.GPUs {
		d := m.server.Devices[i].(*server.Device)
		d.MigMode = pg.MIGMode
		for _, in := range pg.Instances {
			info, ret := d.GetGpuInstanceProfileInfo(in.ProfileID)
			if ret != gonvml.SUCCESS {
				return fmt.Errorf("gpu %d: gpu instance %d: profile %d: %s", i, in.GIID, in.ProfileID, gonvml.ErrorString(ret))
			}
			d.GpuInstanceCounter = in.GIID
			gi, ret := d.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: in.Start, Size: in.Size})
			if ret != gonvml.SUCCESS {
				return fmt.Errorf("gpu %d: gpu instance %d (profile %d at %d+%d): %s", i, in.GIID, in.ProfileID, in.Start, in.Size, gonvml.ErrorString(ret))
			}
			for _, cp := range in.CIProfile {
				ciInfo, ret := gi.GetComputeInstanceProfileInfo(cp, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != gonvml.SUCCESS {
					return fmt.Errorf("gpu %d: gpu instance %d: compute profile %d: %s", i, in.GIID, cp, gonvml.ErrorString(ret))
				}
				if _, ret := gi.CreateComputeInstance(&ciInfo); ret != gonvml.SUCCESS {
					return fmt.Errorf("gpu %d: gpu instance %d: compute instance: %s", i, in.GIID, gonvml.ErrorString(ret))
				}
			}
		}
		d.GpuInstanceCounter = pg.Next
	}
	return nil
}

// reset removes every instance, switches MIG mode off and makes every GPU answer.
func (m *mockState) reset() {
	m.lost = map[string]bool{}
	for _, dv := range m.server.Devices {
		d := dv.(*server.Device)
		d.Lock()
		d.GpuInstances = map[*server.GpuInstance]struct{}{}
		d.MigMode = 0
		d.GpuInstanceCounter = 0
		d.Unlock()
	}
}
