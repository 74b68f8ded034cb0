package nvml

import (
	"context"
	"fmt"
	"sort"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/model"
)

// describeMIG fills the MIG fields of g: capability, mode, profiles with placements and existing
// instances. name returns the profile name NVML reports ("" for none).
func describeMIG(d gonvml.Device, g *model.GPUInfo, name func(id int) string) error {
	mode, _, ret := d.GetMigMode()
	if ret == gonvml.ERROR_NOT_SUPPORTED {
		return nil
	}
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("mig mode: %s", gonvml.ErrorString(ret))
	}
	g.MIGEnabled = mode == gonvml.DEVICE_MIG_ENABLE
	infos := map[int]gonvml.GpuInstanceProfileInfo{}
	for id := 0; id < gonvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != gonvml.SUCCESS {
			continue
		}
		infos[id] = info
		pls, ret := d.GetGpuInstancePossiblePlacements(&info)
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("mig profile %d placements: %s", id, gonvml.ErrorString(ret))
		}
		pname := name(id)
		if pname == "" {
			pname = model.ProfileName(int(info.SliceCount), info.MemorySizeMB<<20, g.MemoryBytes, profileSuffix(id))
		}
		p := model.MIGProfile{
			ID:              id,
			Name:            pname,
			ComputeSlices:   int(info.SliceCount),
			MemoryBytes:     info.MemorySizeMB << 20,
			Multiprocessors: int(info.MultiprocessorCount),
			MaxInstances:    int(info.InstanceCount),
			CopyEngines:     int(info.CopyEngineCount),
			Decoders:        int(info.DecoderCount),
			Encoders:        int(info.EncoderCount),
			JPEGs:           int(info.JpegCount),
			OFAs:            int(info.OfaCount),
		}
		for _, pl := range pls {
			p.Placements = append(p.Placements, model.Placement{Start: int(pl.Start), Size: int(pl.Size)})
		}
		sort.Slice(p.Placements, func(i, j int) bool { return p.Placements[i].Start < p.Placements[j].Start })
		g.MIGProfiles = append(g.MIGProfiles, p)
		g.Multiprocessors = max(g.Multiprocessors, p.Multiprocessors)
	}
	g.MIGCapable = len(g.MIGProfiles) > 0
	if !g.MIGEnabled {
		return nil
	}
	ids := make([]int, 0, len(infos))
	for id := range infos {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		info := infos[id]
		gis, ret := d.GetGpuInstances(&info)
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("mig profile %d instances: %s", id, gonvml.ErrorString(ret))
		}
		for _, gi := range gis {
			giInfo, ret := gi.GetInfo()
			if ret != gonvml.SUCCESS {
				return fmt.Errorf("gpu instance info: %s", gonvml.ErrorString(ret))
			}
			for _, ciID := range computeInstanceIDs(gi) {
				g.MIGInstances = append(g.MIGInstances, model.MIGInstance{
					ProfileID: id,
					GIID:      int(giInfo.Id),
					CIID:      ciID,
					Placement: model.Placement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)},
				})
			}
		}
	}
	sort.Slice(g.MIGInstances, func(i, j int) bool {
		a, b := g.MIGInstances[i], g.MIGInstances[j]
		if a.GIID != b.GIID {
			return a.GIID < b.GIID
		}
		return a.CIID < b.CIID
	})
	for i := range g.MIGInstances {
		g.MIGInstances[i].UUID = migUUID(d, g.UUID, g.MIGInstances[i].GIID, g.MIGInstances[i].CIID)
	}
	return nil
}

// profileSuffix is the name suffix NVIDIA gives the variants of a slice count: media extensions
// ("+me"), none ("-me"), all of them ("+me.all"), graphics ("+gfx").
func profileSuffix(id int) string {
	switch id {
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		return "+me"
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		return "-me"
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		return "+me.all"
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		gonvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, gonvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		return "+gfx"
	}
	return ""
}

// profileName returns the name NVML reports for GPU instance profile id of d ("" for none): from
// the versioned profile info of the real library, from the mock's table of NVIDIA's names for
// mocks (go-nvml's mock does not implement the versioned call).
func (b *Backend) profileName(d gonvml.Device, id int) string {
	if sd, isMock := d.(*server.Device); isMock {
		return mockProfileNames[sd.Config.Name][id]
	}
	if b.Lib.Extensions().LookupSymbol("nvmlDeviceGetGpuInstanceProfileInfoV") != nil {
		return "" // a driver older than the versioned call (R470)
	}
	info, ret := d.GetGpuInstanceProfileInfoV(id).V2()
	if ret != gonvml.SUCCESS {
		return ""
	}
	return model.NVMLProfileName(int8String(info.Name[:]))
}

func computeInstanceIDs(gi gonvml.GpuInstance) []int {
	var out []int
	for ciProfile := 0; ciProfile < gonvml.COMPUTE_INSTANCE_PROFILE_COUNT; ciProfile++ {
		info, ret := gi.GetComputeInstanceProfileInfo(ciProfile, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != gonvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != gonvml.SUCCESS {
			continue
		}
		for _, ci := range cis {
			if ciInfo, ret := ci.GetInfo(); ret == gonvml.SUCCESS {
				out = append(out, int(ciInfo.Id))
			}
		}
	}
	sort.Ints(out)
	return out
}

// migUUID returns the MIG device UUID. Real NVML enumerates MIG device handles; the mocks cannot
// (those calls panic), so mock MIG UUIDs are derived deterministically from GPU UUID and ids.
func migUUID(d gonvml.Device, gpuUUID string, giID, ciID int) string {
	if _, isMock := d.(*server.Device); isMock {
		return mockMIGUUID(gpuUUID, giID, ciID)
	}
	n, ret := d.GetMaxMigDeviceCount()
	if ret != gonvml.SUCCESS {
		return ""
	}
	for i := 0; i < n; i++ {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		g, r1 := m.GetGpuInstanceId()
		c, r2 := m.GetComputeInstanceId()
		if r1 == gonvml.SUCCESS && r2 == gonvml.SUCCESS && g == giID && c == ciID {
			u, _ := m.GetUUID()
			return u
		}
	}
	return ""
}

// GPU returns the current model of one GPU.
func (b *Backend) GPU(ctx context.Context, uuid string) (model.GPUInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gpuLocked(uuid)
}

func (b *Backend) gpuLocked(uuid string) (model.GPUInfo, error) {
	if err := b.refreshLocked(); err != nil {
		return model.GPUInfo{}, err
	}
	d, err := b.device(uuid)
	if err != nil {
		return model.GPUInfo{}, err
	}
	idx, ret := d.GetIndex()
	if ret != gonvml.SUCCESS {
		return model.GPUInfo{}, fmt.Errorf("gpu %s: index: %s", uuid, gonvml.ErrorString(ret))
	}
	dv, _ := b.Lib.SystemGetDriverVersion()
	return b.describe(idx, d, dv)
}

// CreateMIG creates a GPU instance of the profile at the placement plus one full-size compute
// instance, after checking every MIG constraint against the instances that exist. MIG mode is
// switched on when needed.
func (b *Backend) CreateMIG(ctx context.Context, gpuUUID string, profileID int, pl model.Placement) (model.MIGInstance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	logger := klog.FromContext(ctx)
	g, err := b.gpuLocked(gpuUUID)
	if err != nil {
		return model.MIGInstance{}, err
	}
	if err := g.CheckPlacement(g.MIGInstances, profileID, pl); err != nil {
		return model.MIGInstance{}, err
	}
	d, err := b.device(gpuUUID)
	if err != nil {
		return model.MIGInstance{}, err
	}
	if !g.MIGEnabled {
		if ret, _ := d.SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
			return model.MIGInstance{}, fmt.Errorf("gpu %s: enable MIG mode: %s", gpuUUID, gonvml.ErrorString(ret))
		}
	}
	info, ret := d.GetGpuInstanceProfileInfo(profileID)
	if ret != gonvml.SUCCESS {
		return model.MIGInstance{}, fmt.Errorf("gpu %s: profile %d: %s", gpuUUID, profileID, gonvml.ErrorString(ret))
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)})
	if ret != gonvml.SUCCESS {
		return model.MIGInstance{}, fmt.Errorf("gpu %s: create gpu instance profile %d at %d: %s", gpuUUID, profileID, pl.Start, gonvml.ErrorString(ret))
	}
	giInfo, _ := gi.GetInfo()
	ciInfo, err := fullComputeProfile(gi, int(info.SliceCount))
	if err == nil {
		var ci gonvml.ComputeInstance
		ci, ret = gi.CreateComputeInstance(&ciInfo)
		if ret == gonvml.SUCCESS {
			c, _ := ci.GetInfo()
			in := model.MIGInstance{ProfileID: profileID, GIID: int(giInfo.Id), CIID: int(c.Id), Placement: pl}
			in.UUID = migUUID(d, gpuUUID, in.GIID, in.CIID)
			b.saveMock(ctx)
			logger.V(2).Info("Created MIG instance", "gpu", gpuUUID, "profile", profileID, "start", pl.Start, "gi", in.GIID, "ci", in.CIID)
			return in, nil
		}
		err = fmt.Errorf("create compute instance: %s", gonvml.ErrorString(ret))
	}
	gi.Destroy()
	b.saveMock(ctx)
	return model.MIGInstance{}, fmt.Errorf("gpu %s: %w", gpuUUID, err)
}

func fullComputeProfile(gi gonvml.GpuInstance, slices int) (gonvml.ComputeInstanceProfileInfo, error) {
	for p := gonvml.COMPUTE_INSTANCE_PROFILE_COUNT - 1; p >= 0; p-- {
		info, ret := gi.GetComputeInstanceProfileInfo(p, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == gonvml.SUCCESS && int(info.SliceCount) == slices {
			return info, nil
		}
	}
	return gonvml.ComputeInstanceProfileInfo{}, fmt.Errorf("no compute instance profile with %d slices", slices)
}

// DestroyMIG destroys the compute instances and the GPU instance giID. It returns an error wrapping
// ErrNotFound when the GPU instance does not exist. MIG mode is switched off when no instance is
// left, so the whole GPU is usable again.
func (b *Backend) DestroyMIG(ctx context.Context, gpuUUID string, giID int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refreshLocked(); err != nil {
		return err
	}
	d, err := b.device(gpuUUID)
	if err != nil {
		return err
	}
	found := false
	remaining := 0
	for id := 0; id < gonvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != gonvml.SUCCESS {
			continue
		}
		gis, ret := d.GetGpuInstances(&info)
		if ret != gonvml.SUCCESS {
			continue
		}
		for _, gi := range gis {
			giInfo, _ := gi.GetInfo()
			if int(giInfo.Id) != giID {
				remaining++
				continue
			}
			found = true
			for ciProfile := 0; ciProfile < gonvml.COMPUTE_INSTANCE_PROFILE_COUNT; ciProfile++ {
				ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfile, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != gonvml.SUCCESS {
					continue
				}
				cis, _ := gi.GetComputeInstances(&ciInfo)
				for _, ci := range cis {
					if ret := ci.Destroy(); ret != gonvml.SUCCESS {
						return fmt.Errorf("gpu %s: destroy compute instance of gi %d: %s", gpuUUID, giID, gonvml.ErrorString(ret))
					}
				}
			}
			if ret := gi.Destroy(); ret != gonvml.SUCCESS {
				return fmt.Errorf("gpu %s: destroy gpu instance %d: %s", gpuUUID, giID, gonvml.ErrorString(ret))
			}
		}
	}
	if !found {
		return fmt.Errorf("gpu %s: gpu instance %d: %w", gpuUUID, giID, ErrNotFound)
	}
	if remaining == 0 {
		if ret, _ := d.SetMigMode(gonvml.DEVICE_MIG_DISABLE); ret != gonvml.SUCCESS {
			klog.FromContext(ctx).Error(nil, "Disabling MIG mode failed", "gpu", gpuUUID, "ret", gonvml.ErrorString(ret))
		}
	}
	b.saveMock(ctx)
	klog.FromContext(ctx).V(2).Info("Destroyed MIG instance", "gpu", gpuUUID, "gi", giID)
	return nil
}

// MIGInstanceCount returns how many GPU instances exist on the GPU: 0 when MIG mode is off or not
// supported. It reads only the MIG mode and, with MIG on, the GPU instances of each profile, so it
// is cheap enough for every prepare: describing the whole GPU (GPU) costs milliseconds on real
// NVML.
func (b *Backend) MIGInstanceCount(ctx context.Context, uuid string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refreshLocked(); err != nil {
		return 0, err
	}
	d, err := b.device(uuid)
	if err != nil {
		return 0, err
	}
	mode, _, ret := d.GetMigMode()
	if ret == gonvml.ERROR_NOT_SUPPORTED {
		return 0, nil
	}
	if ret != gonvml.SUCCESS {
		return 0, fmt.Errorf("gpu %s: mig mode: %s", uuid, gonvml.ErrorString(ret))
	}
	if mode != gonvml.DEVICE_MIG_ENABLE {
		return 0, nil
	}
	n := 0
	for id := 0; id < gonvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != gonvml.SUCCESS {
			continue
		}
		gis, ret := d.GetGpuInstances(&info)
		if ret != gonvml.SUCCESS {
			return 0, fmt.Errorf("gpu %s: mig profile %d instances: %s", uuid, id, gonvml.ErrorString(ret))
		}
		n += len(gis)
	}
	return n, nil
}
