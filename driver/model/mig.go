package model

import (
	"fmt"
	"sort"
)

// Counter names of a GPU's counter set. Every name is a DNS label, as the API requires.
const (
	CounterMemory          = "memory"
	CounterMultiprocessors = "multiprocessors"
	CounterComputeSlices   = "compute-slices"
	CounterCopyEngines     = "copy-engines"
	CounterDecoders        = "decoders"
	CounterEncoders        = "encoders"
	CounterJPEGs           = "jpegs"
	CounterOFAs            = "ofas"
)

// MemorySlotCounter is the counter of one memory slot; each slot has capacity 1, so two MIG devices
// with overlapping placements can never both be allocated.
func MemorySlotCounter(slot int) string { return fmt.Sprintf("memory-slot-%d", slot) }

// MemorySlots returns the number of memory slots of the GPU: the end of the furthest placement.
func (g *GPUInfo) MemorySlots() int {
	n := 0
	for _, p := range g.MIGProfiles {
		for _, pl := range p.Placements {
			n = max(n, pl.Start+pl.Size)
		}
	}
	return n
}

// ComputeSlices returns the compute slices of the GPU: the largest profile's slice count.
func (g *GPUInfo) ComputeSlices() int {
	n := 0
	for _, p := range g.MIGProfiles {
		n = max(n, p.ComputeSlices)
	}
	return n
}

// engineTotal is the GPU-wide total of one engine kind: the most that any single profile can use
// when instantiated as often as it may be. This keeps e.g. "+me" profiles (the only ones with an
// OFA) at one instance per GPU.
func (g *GPUInfo) engineTotal(get func(MIGProfile) int) int64 {
	var n int64
	for _, p := range g.MIGProfiles {
		n = max(n, int64(get(p))*int64(max(p.MaxInstances, 1)))
	}
	return n
}

// Counters returns the capacity of every counter in the GPU's counter set. It is empty for GPUs
// without MIG profiles.
func (g *GPUInfo) Counters() map[string]int64 {
	if len(g.MIGProfiles) == 0 {
		return nil
	}
	c := map[string]int64{
		CounterMemory:          int64(g.MemoryBytes),
		CounterMultiprocessors: max(int64(g.Multiprocessors), g.engineTotal(func(p MIGProfile) int { return p.Multiprocessors })),
		CounterComputeSlices:   int64(g.ComputeSlices()),
		CounterCopyEngines:     g.engineTotal(func(p MIGProfile) int { return p.CopyEngines }),
		CounterDecoders:        g.engineTotal(func(p MIGProfile) int { return p.Decoders }),
		CounterEncoders:        g.engineTotal(func(p MIGProfile) int { return p.Encoders }),
		CounterJPEGs:           g.engineTotal(func(p MIGProfile) int { return p.JPEGs }),
		CounterOFAs:            g.engineTotal(func(p MIGProfile) int { return p.OFAs }),
	}
	for s := 0; s < g.MemorySlots(); s++ {
		c[MemorySlotCounter(s)] = 1
	}
	for k, v := range c {
		if v == 0 {
			delete(c, k) // an engine the GPU does not have: no counter, and no device consumes it
		}
	}
	return c
}

// Consumption returns what a MIG device of profile p at placement pl takes from its GPU's counters.
// Zero-valued counters are left out.
func (p MIGProfile) Consumption(pl Placement) map[string]int64 {
	c := map[string]int64{
		CounterMemory:          int64(p.MemoryBytes),
		CounterMultiprocessors: int64(p.Multiprocessors),
		CounterComputeSlices:   int64(p.ComputeSlices),
		CounterCopyEngines:     int64(p.CopyEngines),
		CounterDecoders:        int64(p.Decoders),
		CounterEncoders:        int64(p.Encoders),
		CounterJPEGs:           int64(p.JPEGs),
		CounterOFAs:            int64(p.OFAs),
	}
	for s := pl.Start; s < pl.Start+pl.Size; s++ {
		c[MemorySlotCounter(s)] = 1
	}
	for k, v := range c {
		if v == 0 {
			delete(c, k)
		}
	}
	return c
}

// CheckPlacement enforces the MIG constraints the hardware would enforce (the NVML mock does not):
// the GPU supports MIG, the profile exists, the placement is one of the profile's placements, it
// overlaps no existing instance, and no counter of the GPU goes over capacity.
func (g *GPUInfo) CheckPlacement(existing []MIGInstance, profileID int, pl Placement) error {
	if !g.MIGCapable {
		return fmt.Errorf("gpu %s: MIG is not supported", g.UUID)
	}
	p, ok := g.Profile(profileID)
	if !ok {
		return fmt.Errorf("gpu %s: unknown MIG profile id %d", g.UUID, profileID)
	}
	valid := false
	for _, cand := range p.Placements {
		if cand == pl {
			valid = true
			break
		}
	}
	if !valid {
		return fmt.Errorf("gpu %s: placement start=%d size=%d is not valid for profile %s", g.UUID, pl.Start, pl.Size, p.Name)
	}
	used := map[string]int64{}
	count := 0
	for _, in := range existing {
		if in.Placement.Overlaps(pl) {
			return fmt.Errorf("gpu %s: placement start=%d of profile %s overlaps MIG instance %d (start=%d size=%d)",
				g.UUID, pl.Start, p.Name, in.GIID, in.Placement.Start, in.Placement.Size)
		}
		ip, ok := g.Profile(in.ProfileID)
		if !ok {
			continue
		}
		if ip.ID == p.ID {
			count++
		}
		for k, v := range ip.Consumption(in.Placement) {
			used[k] += v
		}
	}
	if p.MaxInstances > 0 && count >= p.MaxInstances {
		return fmt.Errorf("gpu %s: profile %s already has its maximum of %d instances", g.UUID, p.Name, p.MaxInstances)
	}
	capacity := g.Counters()
	want := p.Consumption(pl)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if used[k]+want[k] > capacity[k] {
			return fmt.Errorf("gpu %s: profile %s needs %d of counter %q, only %d of %d left",
				g.UUID, p.Name, want[k], k, capacity[k]-used[k], capacity[k])
		}
	}
	return nil
}
