package model

import (
	"sort"
	"strings"
)

// PlacedProfile is one partitionable MIG device: a profile at one of its placements.
type PlacedProfile struct {
	Profile   MIGProfile
	Placement Placement
}

// EssentialCounters returns the part of Counters() that the scheduler needs when the GPU is
// published as the whole GPU plus the MIG devices devs, with their capacities.
//
// Every counter costs the scheduler work for every device on every node it examines, so the driver
// publishes only the counters that can ever refuse an allocation. The result allows exactly the
// same sets of devices as the full counter set, provided that the whole GPU consumes every kept
// counter at capacity and every device of devs consumes Consumption restricted to the kept
// counters:
//
//   - Memory slots: the full set forbids two devices whose placements overlap (they share a slot of
//     capacity 1) and the whole GPU next to any device. A slot is dropped only while every
//     overlapping pair of devs still shares a kept slot and every device still consumes one, so
//     both rules still hold.
//   - Other counters (memory, multiprocessors, compute slices, engines): with overlaps excluded,
//     a set of devices is a set of pairwise disjoint placements. A counter is dropped when even the
//     heaviest such set (weighted interval scheduling over the memory slots) stays within its
//     capacity: it can then never be the reason for a refusal.
//
// TestEssentialCountersExact checks the equivalence by enumerating every allowed set.
func (g *GPUInfo) EssentialCounters(devs []PlacedProfile) map[string]int64 {
	full := g.Counters()
	if len(devs) == 0 || len(full) == 0 {
		return nil
	}
	kept := map[string]int64{}

	// Memory slots touched by some device, removed greedily from the highest while the two rules
	// above still hold.
	slots := map[int]bool{}
	for _, d := range devs {
		for s := d.Placement.Start; s < d.Placement.Start+d.Placement.Size; s++ {
			slots[s] = true
		}
	}
	order := make([]int, 0, len(slots))
	for s := range slots {
		order = append(order, s)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(order)))
	for _, s := range order {
		slots[s] = false
		if !slotsSeparate(devs, slots) {
			slots[s] = true
		}
	}
	for s, keep := range slots {
		if keep {
			kept[MemorySlotCounter(s)] = full[MemorySlotCounter(s)]
		}
	}

	// Other counters: kept when the heaviest set of disjoint placements exceeds the capacity.
	for name, capacity := range full {
		if strings.HasPrefix(name, memorySlotPrefix) {
			continue
		}
		if maxDisjointConsumption(devs, name) > capacity {
			kept[name] = capacity
		}
	}
	return kept
}

const memorySlotPrefix = "memory-slot-"

// slotsSeparate reports whether the slots marked true still make every device consume a slot and
// every two overlapping devices share one.
func slotsSeparate(devs []PlacedProfile, slots map[int]bool) bool {
	covered := func(p Placement) bool {
		for s := p.Start; s < p.Start+p.Size; s++ {
			if slots[s] {
				return true
			}
		}
		return false
	}
	for i, a := range devs {
		if !covered(a.Placement) {
			return false
		}
		for _, b := range devs[i+1:] {
			if !a.Placement.Overlaps(b.Placement) {
				continue
			}
			lo := max(a.Placement.Start, b.Placement.Start)
			hi := min(a.Placement.Start+a.Placement.Size, b.Placement.Start+b.Placement.Size)
			if !covered(Placement{Start: lo, Size: hi - lo}) {
				return false
			}
		}
	}
	return true
}

// maxDisjointConsumption returns the largest sum of counter name over sets of devices with pairwise
// disjoint placements (weighted interval scheduling over memory slots).
func maxDisjointConsumption(devs []PlacedProfile, name string) int64 {
	end := 0
	for _, d := range devs {
		end = max(end, d.Placement.Start+d.Placement.Size)
	}
	// best[e] is the heaviest set within slots [0, e).
	best := make([]int64, end+1)
	for e := 1; e <= end; e++ {
		best[e] = best[e-1]
		for _, d := range devs {
			if d.Placement.Start+d.Placement.Size == e {
				best[e] = max(best[e], best[d.Placement.Start]+d.Profile.Consumption(d.Placement)[name])
			}
		}
	}
	return best[end]
}

// Restrict returns the entries of c whose names are in keep.
func Restrict(c map[string]int64, keep map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(c))
	for k, v := range c {
		if _, ok := keep[k]; ok {
			out[k] = v
		}
	}
	return out
}
