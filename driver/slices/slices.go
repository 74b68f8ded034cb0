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
	// ExactProfiles makes Profiles the selection even when empty: no profile publishes no dynamic
	// MIG device (the demand-shaped layout with no MIG demand).
	ExactProfiles bool
	// Taints are added to every device of the GPU with the given UUID (health).
	Taints map[string][]resourceapi.DeviceTaint
	// MaxDevicesPerSlice caps devices per slice; 0 means the API limit (64 when devices consume
	// counters, 128 otherwise).
	MaxDevicesPerSlice int
	// Compat publishes the attributes of NVIDIA's DRA driver (its names and spellings, the parent
	// GPU's attributes and the engine capacities on MIG devices) for NVIDIA compatibility mode,
	// plus AttrImplementation on whole GPUs and static MIG devices.
	Compat bool
	// MIGGPUs, when positive, publishes dynamic MIG only on the MIGGPUs MIG-capable GPUs with the
	// highest indices; the node's other GPUs are published as whole GPUs only, without counters
	// (a per-node mixed layout, like a mixed MIG configuration of the GPU operator). Fewer
	// partitionable GPUs mean fewer devices per node for the scheduler to search. 0 means all.
	MIGGPUs int
}

// dynamicGPU reports whether g is published with dynamic MIG devices.
func (o Options) dynamicGPU(g *model.GPUInfo, gpus []model.GPUInfo) bool {
	if o.mode() != MIGDynamic || !g.MIGCapable || len(wantedPlacements(g, o)) == 0 {
		return false
	}
	if o.MIGGPUs <= 0 {
		return true
	}
	higher := 0
	for i := range gpus {
		if gpus[i].MIGCapable && gpus[i].Index > g.Index {
			higher++
		}
	}
	return higher < o.MIGGPUs
}

func (o Options) mode() MIGMode {
	if o.MIG == "" {
		return MIGDynamic
	}
	return o.MIG
}

func (o Options) profileWanted(name string) bool {
	if len(o.Profiles) == 0 && !o.ExactProfiles {
		return true
	}
	for _, p := range o.Profiles {
		if p == name {
			return true
		}
	}
	return false
}

// UnknownProfiles returns the entries of o.Profiles that no MIG-capable GPU of gpus offers, in
// their order in o.Profiles. Such an entry publishes nothing on this node: a typo, or a profile of
// another GPU model in a fleet that shares one configuration. Profiles only select devices in
// dynamic mode, so in the other modes it returns nil.
func (o Options) UnknownProfiles(gpus []model.GPUInfo) []string {
	if o.mode() != MIGDynamic {
		return nil
	}
	offered := func(name string) bool {
		for i := range gpus {
			if !gpus[i].MIGCapable {
				continue
			}
			for _, p := range gpus[i].MIGProfiles {
				if p.Name == name {
					return true
				}
			}
		}
		return false
	}
	var out []string
	for _, want := range o.Profiles {
		if !offered(want) {
			out = append(out, want)
		}
	}
	return out
}

// Build returns the driver's resources for one node: a single pool named after the node. Counter
// sets go into their own slices (at most 8 per slice), devices into further slices within the
// per-slice device limit, in scan order (see below). Output is deterministic.
//
// Scan order: the scheduler's allocator tries devices first-fit in slice order and pays a CEL
// evaluation for every device it looks at that is not itself allocated (a MIG device of a GPU that
// a whole-GPU claim took is not allocated, only blocked by counters). Build therefore lists every
// whole GPU first (ascending index), then the MIG devices grouped by GPU in descending index
// (placedOrder within a GPU). Whole-GPU requests never look at MIG devices while a whole GPU is
// free, and MIG requests fill GPUs from the other end than whole-GPU requests do, so they rarely
// walk through the MIG devices of GPUs a whole-GPU claim has taken. The first device slice holds
// the whole GPUs and as many MIG groups as fit.
func Build(node string, gpus []model.GPUInfo, opts Options) resourceslice.DriverResources {
	sorted := append([]model.GPUInfo(nil), gpus...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })

	var counterSets []resourceapi.CounterSet
	// A unit is a run of devices kept in one slice: a whole GPU, or the MIG devices of one GPU.
	type unit struct {
		devices   []resourceapi.Device
		consuming bool
	}
	var wholes, migs []unit
	for i := range sorted {
		g := &sorted[i]
		var whole, mig []resourceapi.Device
		consuming := false
		switch {
		case opts.dynamicGPU(g, sorted):
			placed := wantedPlacements(g, opts)
			kept := g.EssentialCounters(placed)
			counterSets = append(counterSets, counterSet(g, kept))
			whole = []resourceapi.Device{wholeGPU(g, consumption(g, kept), opts.Compat)}
			mig = dynamicDevices(g, placed, kept, opts.Compat)
			consuming = true
		case opts.mode() == MIGStatic && g.MIGEnabled:
			mig = staticDevices(g, opts.Compat)
		default:
			whole = []resourceapi.Device{wholeGPU(g, nil, opts.Compat)}
		}
		if t := opts.Taints[g.UUID]; len(t) > 0 {
			for _, devs := range [][]resourceapi.Device{whole, mig} {
				for d := range devs {
					devs[d].Taints = append([]resourceapi.DeviceTaint(nil), t...)
				}
			}
		}
		if len(whole) > 0 {
			wholes = append(wholes, unit{devices: whole, consuming: consuming})
		}
		if len(mig) > 0 {
			migs = append(migs, unit{devices: mig, consuming: consuming})
		}
	}
	units := wholes
	for i := len(migs) - 1; i >= 0; i-- {
		units = append(units, migs[i])
	}

	var out []resourceslice.Slice
	for start := 0; start < len(counterSets); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(counterSets))
		out = append(out, resourceslice.Slice{SharedCounters: counterSets[start:end]})
	}
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
	var cur resourceslice.Slice
	curConsuming := false
	flush := func() {
		if len(cur.Devices) > 0 {
			out = append(out, cur)
		}
		cur, curConsuming = resourceslice.Slice{}, false
	}
	for _, u := range units {
		if len(cur.Devices)+len(u.devices) > limit(curConsuming || u.consuming) {
			flush()
		}
		// A single GPU never exceeds the limit on real hardware (H100: 28 MIG devices); split
		// anyway rather than publish an invalid slice.
		for len(u.devices) > limit(u.consuming) {
			n := limit(u.consuming)
			out = append(out, resourceslice.Slice{Devices: u.devices[:n]})
			u.devices = u.devices[n:]
		}
		cur.Devices = append(cur.Devices, u.devices...)
		curConsuming = curConsuming || u.consuming
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

func wholeGPU(g *model.GPUInfo, consumes []resourceapi.DeviceCounterConsumption, compat bool) resourceapi.Device {
	a := commonAttributes(g)
	if compat {
		addCompatAttributes(a, g)
		a[AttrImplementation] = str(Implementation)
	}
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

// migAttributes are the attributes and capacities of a static MIG instance: the parent GPU's
// common attributes plus type, parent and profile.
func migAttributes(g *model.GPUInfo, p model.MIGProfile, compat bool) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) {
	a := commonAttributes(g)
	if compat {
		addCompatAttributes(a, g)
		a[AttrImplementation] = str(Implementation)
		if g.PCIBusID != "" {
			a[deviceattribute.StandardDeviceAttributePCIBusID] = str(g.PCIBusID)
		}
	}
	a[AttrType] = str(TypeMIG)
	a[AttrParentUUID] = str(g.UUID)
	a[AttrProfile] = str(p.Name)
	return a, migCapacity(p, compat)
}

func migCapacity(p model.MIGProfile, compat bool) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	c := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapMemory:          qty(int64(p.MemoryBytes)),
		CapMultiprocessors: qty(int64(p.Multiprocessors)),
	}
	if compat {
		c[CapCopyEngines] = qty(int64(p.CopyEngines))
		c[CapDecoders] = qty(int64(p.Decoders))
		c[CapEncoders] = qty(int64(p.Encoders))
		c[CapJPEGEngines] = qty(int64(p.JPEGs))
		c[CapOFAEngines] = qty(int64(p.OFAs))
	}
	return c
}

// dynamicMIGAttributes are the attributes of a partitionable MIG device. A node publishes ten to
// thirty of them per GPU and the scheduler converts every attribute of every device of every node
// it examines, for every pod, so they carry only what selects or aligns a MIG device: type,
// profile, the parent GPU (parentUUID, index) and the PCIe root for alignment with other devices.
// Node-wide facts (product name, brand, architecture, compute capability, driver version, NUMA
// node) stay on the whole GPU; the placement is part of the device name.
//
// In compatibility mode they also carry the parent GPU's attributes as NVIDIA's driver publishes
// them (product, brand, architecture, versions, PCI bus id, NUMA node), which costs scheduler time
// per device but lets NVIDIA's selectors run unchanged.
func dynamicMIGAttributes(g *model.GPUInfo, p model.MIGProfile, compat bool) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:       str(TypeMIG),
		AttrParentUUID: str(g.UUID),
		AttrProfile:    str(p.Name),
		AttrIndex:      num(int64(g.Index)),
	}
	if g.PCIeRoot != "" {
		a[deviceattribute.StandardDeviceAttributePCIeRoot] = str(g.PCIeRoot)
	}
	if compat {
		for k, v := range commonAttributes(g) {
			a[k] = v
		}
		addCompatAttributes(a, g)
		if g.PCIBusID != "" {
			a[deviceattribute.StandardDeviceAttributePCIBusID] = str(g.PCIBusID)
		}
	}
	return a
}

// counterSet is the GPU's counter set with the counters kept (model.EssentialCounters).
func counterSet(g *model.GPUInfo, kept map[string]int64) resourceapi.CounterSet {
	cs := resourceapi.CounterSet{Name: model.CounterSetName(g.Index), Counters: map[string]resourceapi.Counter{}}
	for k, v := range kept {
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

// wantedPlacements lists the MIG devices published for g: every placement of every wanted
// profile. They are in the order the scheduler's first-fit search should try them (placedOrder).
func wantedPlacements(g *model.GPUInfo, opts Options) []model.PlacedProfile {
	var out []model.PlacedProfile
	for _, p := range g.MIGProfiles {
		if !opts.profileWanted(p.Name) {
			continue
		}
		for _, pl := range p.Placements {
			out = append(out, model.PlacedProfile{Profile: p, Placement: pl})
		}
	}
	placedOrder(out)
	return out
}

// placedOrder sorts the MIG devices of one GPU: larger profiles first (a request for a small
// profile looks at fewer devices of other profiles before its own), and within a profile the
// placements that block the fewest placements of larger published profiles first, so that
// first-fit allocation keeps large placements free as long as it can (on an H100, 1g at slot 3
// before slots 0-2 and 4-6, which each block a 3g placement). Ties keep the placement order.
func placedOrder(devs []model.PlacedProfile) {
	blocks := func(d model.PlacedProfile) int {
		n := 0
		for _, o := range devs {
			if o.Profile.ComputeSlices > d.Profile.ComputeSlices && o.Placement.Overlaps(d.Placement) {
				n++
			}
		}
		return n
	}
	sort.SliceStable(devs, func(i, j int) bool {
		a, b := devs[i], devs[j]
		if a.Profile.ComputeSlices != b.Profile.ComputeSlices {
			return a.Profile.ComputeSlices > b.Profile.ComputeSlices
		}
		if a.Profile.ID != b.Profile.ID {
			return a.Profile.ID < b.Profile.ID
		}
		if ba, bb := blocks(a), blocks(b); ba != bb {
			return ba < bb
		}
		return a.Placement.Start < b.Placement.Start
	})
}

// dynamicDevices returns one device per placed profile, consuming its share of the kept counters
// (the whole GPU consumes every kept counter at capacity).
func dynamicDevices(g *model.GPUInfo, placed []model.PlacedProfile, kept map[string]int64, compat bool) []resourceapi.Device {
	var devs []resourceapi.Device
	for _, pp := range placed {
		devs = append(devs, resourceapi.Device{
			Name:             model.DynamicMIGName(g.Index, pp.Profile.Name, pp.Placement.Start),
			Attributes:       dynamicMIGAttributes(g, pp.Profile, compat),
			Capacity:         migCapacity(pp.Profile, compat),
			ConsumesCounters: consumption(g, model.Restrict(pp.Profile.Consumption(pp.Placement), kept)),
		})
	}
	return devs
}

// staticDevices returns one device per existing MIG instance.
func staticDevices(g *model.GPUInfo, compat bool) []resourceapi.Device {
	var devs []resourceapi.Device
	for _, in := range g.MIGInstances {
		p, ok := g.Profile(in.ProfileID)
		if !ok {
			p = model.MIGProfile{ID: in.ProfileID, Name: fmt.Sprintf("profile-%d", in.ProfileID)}
		}
		a, c := migAttributes(g, p, compat)
		a[AttrPlacement] = num(int64(in.Placement.Start))
		if in.UUID != "" {
			a[AttrUUID] = str(in.UUID)
		}
		devs = append(devs, resourceapi.Device{Name: model.StaticMIGName(g.Index, in.GIID, in.CIID), Attributes: a, Capacity: c})
	}
	return devs
}
