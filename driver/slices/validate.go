package slices

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/neuronetes/neuronetes/driver/model"
)

// Validate checks the API limits the apiserver enforces (devices, counter sets and counters per
// slice, attributes per device, counter consumptions per device) and what it does not: that every
// consumed counter set and counter exists in the pool, that no device consumes more than a counter's
// capacity, and that device names are unique DNS labels.
func Validate(res resourceslice.DriverResources) error {
	for poolName, pool := range res.Pools {
		sets := map[string]map[string]int64{}
		for i, s := range pool.Slices {
			if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
				return fmt.Errorf("pool %s slice %d: sharedCounters and devices in one slice", poolName, i)
			}
			if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
				return fmt.Errorf("pool %s slice %d: %d counter sets, limit %d", poolName, i, len(s.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
			}
			for _, cs := range s.SharedCounters {
				if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
					return fmt.Errorf("pool %s counter set %s: %d counters, limit %d", poolName, cs.Name, len(cs.Counters), resourceapi.ResourceSliceMaxCountersPerCounterSet)
				}
				if _, dup := sets[cs.Name]; dup {
					return fmt.Errorf("pool %s: duplicate counter set %s", poolName, cs.Name)
				}
				sets[cs.Name] = map[string]int64{}
				for k, v := range cs.Counters {
					if errs := validation.IsDNS1123Label(k); len(errs) > 0 {
						return fmt.Errorf("pool %s counter set %s: counter name %q: %s", poolName, cs.Name, k, strings.Join(errs, "; "))
					}
					sets[cs.Name][k] = v.Value.Value()
				}
			}
		}
		names := map[string]bool{}
		for i, s := range pool.Slices {
			consuming := false
			for _, d := range s.Devices {
				if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
					return fmt.Errorf("pool %s device name %q: %s", poolName, d.Name, strings.Join(errs, "; "))
				}
				if names[d.Name] {
					return fmt.Errorf("pool %s: duplicate device %s", poolName, d.Name)
				}
				names[d.Name] = true
				if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
					return fmt.Errorf("pool %s device %s: %d attributes and capacities, limit %d", poolName, d.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
				}
				if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
					return fmt.Errorf("pool %s device %s: %d counter consumptions, limit %d", poolName, d.Name, len(d.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
				}
				if len(d.Taints) > resourceapi.DeviceTaintsMaxLength {
					return fmt.Errorf("pool %s device %s: %d taints, limit %d", poolName, d.Name, len(d.Taints), resourceapi.DeviceTaintsMaxLength)
				}
				for _, cc := range d.ConsumesCounters {
					consuming = true
					set, ok := sets[cc.CounterSet]
					if !ok {
						return fmt.Errorf("pool %s device %s: consumesCounters.counterSet %q does not exist", poolName, d.Name, cc.CounterSet)
					}
					for k, v := range cc.Counters {
						capacity, ok := set[k]
						if !ok {
							return fmt.Errorf("pool %s device %s: counter %q not in counter set %s", poolName, d.Name, k, cc.CounterSet)
						}
						if v.Value.Value() > capacity {
							return fmt.Errorf("pool %s device %s: consumes %d of counter %q, capacity %d", poolName, d.Name, v.Value.Value(), k, capacity)
						}
					}
				}
			}
			limit := resourceapi.ResourceSliceMaxDevices
			if consuming {
				limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			}
			if len(s.Devices) > limit {
				return fmt.Errorf("pool %s slice %d: %d devices, limit %d", poolName, i, len(s.Devices), limit)
			}
		}
	}
	return nil
}

// Kind is what a published device stands for.
type Kind int

const (
	// KindGPU is a whole GPU.
	KindGPU Kind = iota
	// KindDynamicMIG is a MIG device created at prepare time.
	KindDynamicMIG
	// KindStaticMIG is an existing MIG instance.
	KindStaticMIG
)

// Ref resolves a device name back to the model.
type Ref struct {
	Kind      Kind
	GPU       model.GPUInfo
	Profile   model.MIGProfile
	Placement model.Placement
	Instance  model.MIGInstance
}

// Resolve maps a device name published by Build(gpus, opts) back to what it stands for. It is the
// inverse of the naming scheme and fails for names Build would not publish.
func Resolve(gpus []model.GPUInfo, opts Options, name string) (Ref, error) {
	rest, ok := strings.CutPrefix(name, "gpu-")
	if !ok {
		return Ref{}, fmt.Errorf("device %q: not a %s device name", name, model.DriverName)
	}
	idxStr, mig, hasMIG := strings.Cut(rest, "-mig-")
	idx, err := strconv.Atoi(idxStr)
	if err != nil {
		return Ref{}, fmt.Errorf("device %q: bad GPU index: %w", name, err)
	}
	var g *model.GPUInfo
	for i := range gpus {
		if gpus[i].Index == idx {
			g = &gpus[i]
		}
	}
	if g == nil {
		return Ref{}, fmt.Errorf("device %q: no GPU with index %d", name, idx)
	}
	if !hasMIG {
		if opts.mode() == MIGStatic && g.MIGEnabled {
			return Ref{}, fmt.Errorf("device %q: GPU is partitioned into static MIG devices", name)
		}
		return Ref{Kind: KindGPU, GPU: *g}, nil
	}
	// Static: "<gi>-<ci>"; dynamic: "<profile token>-p<start>".
	if a, b, ok := strings.Cut(mig, "-"); ok {
		gi, err1 := strconv.Atoi(a)
		ci, err2 := strconv.Atoi(b)
		if err1 == nil && err2 == nil {
			for _, in := range g.MIGInstances {
				if in.GIID == gi && in.CIID == ci {
					p, _ := g.Profile(in.ProfileID)
					return Ref{Kind: KindStaticMIG, GPU: *g, Profile: p, Placement: in.Placement, Instance: in}, nil
				}
			}
			return Ref{}, fmt.Errorf("device %q: MIG instance %d/%d does not exist", name, gi, ci)
		}
	}
	if !opts.dynamicGPU(g, gpus) {
		return Ref{}, fmt.Errorf("device %q: dynamic MIG is disabled on GPU %d", name, idx)
	}
	cut := strings.LastIndex(mig, "-p")
	if cut < 0 {
		return Ref{}, fmt.Errorf("device %q: missing placement", name)
	}
	start, err := strconv.Atoi(mig[cut+2:])
	if err != nil {
		return Ref{}, fmt.Errorf("device %q: bad placement: %w", name, err)
	}
	token := mig[:cut]
	for _, p := range g.MIGProfiles {
		if model.NameToken(p.Name) != token || !opts.profileWanted(p.Name) {
			continue
		}
		for _, pl := range p.Placements {
			if pl.Start == start {
				return Ref{Kind: KindDynamicMIG, GPU: *g, Profile: p, Placement: pl}, nil
			}
		}
	}
	return Ref{}, fmt.Errorf("device %q: no MIG profile %q with placement %d", name, token, start)
}
