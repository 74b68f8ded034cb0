// Package slices turns the device model of one node into the ResourceSlices the driver publishes.
// Build is a pure function: no NVML, no client. The scale simulator publishes the driver's own
// slices for many fake nodes with it.
package slices

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
)

// MIGMode selects how MIG-capable GPUs are published.
type MIGMode string

const (
	// MIGDynamic publishes every MIG-capable GPU as a partitionable device: a counter set per GPU,
	// one device per (profile, placement) and the whole GPU consuming all counters. MIG instances
	// are created at prepare time. This is the default.
	MIGDynamic MIGMode = "dynamic"
	// MIGStatic publishes the MIG instances that exist on GPUs with MIG mode on, and GPUs with MIG
	// mode off as whole GPUs.
	MIGStatic MIGMode = "static"
	// MIGNone publishes whole GPUs only.
	MIGNone MIGMode = "none"
)

// Attribute and capacity names (unqualified names belong to the driver's domain).
const (
	AttrType                  = "type"
	AttrUUID                  = "uuid"
	AttrParentUUID            = "parentUUID"
	AttrIndex                 = "index"
	AttrProductName           = "productName"
	AttrBrand                 = "brand"
	AttrArchitecture          = "architecture"
	AttrCUDAComputeCapability = "cudaComputeCapability"
	AttrDriverVersion         = "driverVersion"
	AttrNVLinkDomain          = "nvlinkDomain"
	AttrProfile               = "profile"
	AttrPlacement             = "placementStart"
	CapMemory                 = "memory"
	CapMultiprocessors        = "multiprocessors"

	// TypeGPU and TypeMIG are the values of the type attribute.
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// Options shape the published layout.
type Options struct {
	// MIG selects the MIG publishing mode; empty means MIGDynamic.
	MIG MIGMode
	// Profiles, when not empty, limits dynamic MIG devices to these profile names (e.g. "1g.10gb").
	// Fewer devices per node cost the scheduler less (see platform-facts); nil publishes all.
	Profiles []string
	// Taints are added to every device of the GPU with the given UUID (health).
	Taints map[string][]resourceapi.DeviceTaint
	// MaxDevicesPerSlice caps devices per slice; 0 means the API limit (64 when devices consume
	// counters, 128 otherwise).
	MaxDevicesPerSlice int
}

func (o Options) mode() MIGMode {
	if o.MIG == "" {
		return MIGDynamic
	}
	return o.MIG
}

func (o Options) profileWanted(name string) bool {
	if len(o.Profiles) == 0 {
		return true
	}
	for _, p := range o.Profiles {
		if p == name {
			return true
		}
	}
	return false
}

// Build returns the driver's resources for one node: a single pool named after the node. Counter
// sets go into their own slices (at most 8 per slice), devices into further slices, each GPU's
// devices kept together and within the per-slice device limit. Output is deterministic.
func Build(node string, gpus []model.GPUInfo, opts Options) resourceslice.DriverResources {
	sorted := append([]model.GPUInfo(nil), gpus...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })

	var counterSets []resourceapi.CounterSet
	type group struct {
		devices   []resourceapi.Device
		consuming bool
	}
	var groups []group
	for i := range sorted {
		g := &sorted[i]
		var devs []resourceapi.Device
		consuming := false
		switch {
		case opts.mode() == MIGDynamic && g.MIGCapable:
			counterSets = append(counterSets, counterSet(g))
			devs = dynamicDevices(g, opts)
			consuming = true
		case opts.mode() == MIGStatic && g.MIGEnabled:
			devs = staticDevices(g)
		default:
			devs = []resourceapi.Device{wholeGPU(g, nil)}
		}
		for d := range devs {
			if t := opts.Taints[g.UUID]; len(t) > 0 {
				devs[d].Taints = append([]resourceapi.DeviceTaint(nil), t...)
			}
		}
		groups = append(groups, group{devices: devs, consuming: consuming})
	}

	var out []resourceslice.Slice
	for start := 0; start < len(counterSets); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(counterSets))
		out = append(out, resourceslice.Slice{SharedCounters: counterSets[start:end]})
	}
	var cur resourceslice.Slice
	curConsuming := false
	flush := func() {
		if len(cur.Devices) > 0 {
			out = append(out, cur)
		}
		cur, curConsuming = resourceslice.Slice{}, false
	}
	for _, gr := range groups {
		limit := func(consuming bool) int {
			l := resourceapi.ResourceSliceMaxDevices
			if consuming {
				l = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			}
			if opts.MaxDevicesPerSlice > 0 {
				l = min(l, opts.MaxDevicesPerSlice)
			}
			return l
		}
		if len(cur.Devices)+len(gr.devices) > limit(curConsuming || gr.consuming) {
			flush()
		}
		// A single GPU never exceeds the limit on real hardware (H100: 29 devices); split anyway
		// rather than publish an invalid slice.
		for len(gr.devices) > limit(gr.consuming) {
			n := limit(gr.consuming)
			out = append(out, resourceslice.Slice{Devices: gr.devices[:n]})
			gr.devices = gr.devices[n:]
		}
		cur.Devices = append(cur.Devices, gr.devices...)
		curConsuming = curConsuming || gr.consuming
	}
	flush()
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: {Slices: out}}}
}

func str(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: ptr.To(s)}
}
func ver(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
}
func num(n int64) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValue: ptr.To(n)}
}
func qty(n int64) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(n, resource.BinarySI)}
}
func counter(n int64) resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(n, resource.BinarySI)}
}

// commonAttributes are shared by a GPU and its MIG devices.
func commonAttributes(g *model.GPUInfo) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrIndex:       num(int64(g.Index)),
		AttrProductName: str(g.ProductName),
	}
	if g.Brand != "" {
		a[AttrBrand] = str(g.Brand)
	}
	if g.Architecture != "" {
		a[AttrArchitecture] = str(g.Architecture)
	}
	if g.CUDAComputeCapability != "" {
		a[AttrCUDAComputeCapability] = ver(g.CUDAComputeCapability)
	}
	if g.DriverVersion != "" {
		a[AttrDriverVersion] = ver(g.DriverVersion)
	}
	if g.PCIeRoot != "" {
		a[deviceattribute.StandardDeviceAttributePCIeRoot] = str(g.PCIeRoot)
	}
	if g.NUMANode >= 0 {
		a[deviceattribute.StandardDeviceAttributeNUMANode] = num(int64(g.NUMANode))
	}
	return a
}

func wholeGPU(g *model.GPUInfo, consumes []resourceapi.DeviceCounterConsumption) resourceapi.Device {
	a := commonAttributes(g)
	a[AttrType] = str(TypeGPU)
	a[AttrUUID] = str(g.UUID)
	if g.PCIBusID != "" {
		a[deviceattribute.StandardDeviceAttributePCIBusID] = str(g.PCIBusID)
	}
	if g.NVLinkDomain != "" {
		a[AttrNVLinkDomain] = str(g.NVLinkDomain)
	}
	c := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapMemory: qty(int64(g.MemoryBytes))}
	if g.Multiprocessors > 0 {
		c[CapMultiprocessors] = qty(int64(g.Multiprocessors))
	}
	return resourceapi.Device{Name: model.WholeGPUName(g.Index), Attributes: a, Capacity: c, ConsumesCounters: consumes}
}

func migAttributes(g *model.GPUInfo, p model.MIGProfile) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) {
	a := commonAttributes(g)
	a[AttrType] = str(TypeMIG)
	a[AttrParentUUID] = str(g.UUID)
	a[AttrProfile] = str(p.Name)
	c := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapMemory:          qty(int64(p.MemoryBytes)),
		CapMultiprocessors: qty(int64(p.Multiprocessors)),
	}
	return a, c
}

func counterSet(g *model.GPUInfo) resourceapi.CounterSet {
	cs := resourceapi.CounterSet{Name: model.CounterSetName(g.Index), Counters: map[string]resourceapi.Counter{}}
	for k, v := range g.Counters() {
		cs.Counters[k] = counter(v)
	}
	return cs
}

func consumption(g *model.GPUInfo, c map[string]int64) []resourceapi.DeviceCounterConsumption {
	out := resourceapi.DeviceCounterConsumption{CounterSet: model.CounterSetName(g.Index), Counters: map[string]resourceapi.Counter{}}
	for k, v := range c {
		out.Counters[k] = counter(v)
	}
	return []resourceapi.DeviceCounterConsumption{out}
}

// dynamicDevices returns the whole GPU (consuming every counter) and one device per wanted
// (profile, placement).
func dynamicDevices(g *model.GPUInfo, opts Options) []resourceapi.Device {
	devs := []resourceapi.Device{wholeGPU(g, consumption(g, g.Counters()))}
	for _, p := range g.MIGProfiles {
		if !opts.profileWanted(p.Name) {
			continue
		}
		for _, pl := range p.Placements {
			a, c := migAttributes(g, p)
			a[AttrPlacement] = num(int64(pl.Start))
			devs = append(devs, resourceapi.Device{
				Name:             model.DynamicMIGName(g.Index, p.Name, pl.Start),
				Attributes:       a,
				Capacity:         c,
				ConsumesCounters: consumption(g, p.Consumption(pl)),
			})
		}
	}
	return devs
}

// staticDevices returns one device per existing MIG instance.
func staticDevices(g *model.GPUInfo) []resourceapi.Device {
	var devs []resourceapi.Device
	for _, in := range g.MIGInstances {
		p, ok := g.Profile(in.ProfileID)
		if !ok {
			p = model.MIGProfile{ID: in.ProfileID, Name: fmt.Sprintf("profile-%d", in.ProfileID)}
		}
		a, c := migAttributes(g, p)
		a[AttrPlacement] = num(int64(in.Placement.Start))
		if in.UUID != "" {
			a[AttrUUID] = str(in.UUID)
		}
		devs = append(devs, resourceapi.Device{Name: model.StaticMIGName(g.Index, in.GIID, in.CIID), Attributes: a, Capacity: c})
	}
	return devs
}
