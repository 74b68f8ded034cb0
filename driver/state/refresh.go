package state

import (
	"context"
	"fmt"
	"reflect"
	"sort"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
)

// Refresh re-reads the inventory (MIG instances an admin created or destroyed, GPUs added or
// removed) and reports whether the published model changed. A GPU or static MIG instance that a
// recorded claim uses stays in the model when the inventory no longer reports it: the GPU is
// marked missing (and tainted) until the claim is gone, so the scheduler keeps accounting for it.
func (s *State) Refresh(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reload(ctx)
	gpus, err := s.cfg.Inventory(ctx)
	if err != nil {
		return false, fmt.Errorf("inventory: %w", err)
	}
	merged, missing := keepClaimed(klog.FromContext(ctx), s.gpus, s.withoutOwnedInstances(gpus), s.data.Claims)
	if reflect.DeepEqual(merged, s.gpus) && reflect.DeepEqual(missing, s.missing) {
		return false, nil
	}
	klog.FromContext(ctx).Info("Inventory changed", "gpus", len(merged), "missingWithClaims", len(missing))
	s.gpus, s.missing = merged, missing
	return true, nil
}

// keepClaimed returns the new inventory plus what claims still use from the old one: GPUs the
// new one lacks (reported as missing, by UUID) and static MIG instances that disappeared. A new
// GPU that took the index of a kept one is left out until the claim is gone: device names derive
// from the index and must keep meaning the claimed device.
func keepClaimed(logger klog.Logger, old, fresh []model.GPUInfo, claims map[string]checkpoint.Claim) ([]model.GPUInfo, map[string]bool) {
	byUUID := map[string]int{}
	for i, g := range fresh {
		byUUID[g.UUID] = i
	}
	oldByUUID := map[string]model.GPUInfo{}
	for _, g := range old {
		oldByUUID[g.UUID] = g
	}
	missing := map[string]bool{}
	var kept []model.GPUInfo
	uids := make([]string, 0, len(claims))
	for uid := range claims {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		for _, d := range claims[uid].Devices {
			i, ok := byUUID[d.GPUUUID]
			if !ok {
				g, known := oldByUUID[d.GPUUUID]
				if !known || missing[d.GPUUUID] {
					continue
				}
				missing[d.GPUUUID] = true
				kept = append(kept, g)
				continue
			}
			if d.MIG != nil && !d.Dynamic && !hasInstance(fresh[i], *d.MIG) {
				ins := append(fresh[i].MIGInstances, *d.MIG)
				sort.Slice(ins, func(a, b int) bool {
					if ins[a].GIID != ins[b].GIID {
						return ins[a].GIID < ins[b].GIID
					}
					return ins[a].CIID < ins[b].CIID
				})
				fresh[i].MIGInstances = ins
				fresh[i].MIGEnabled = true // still partitioned for the claim that holds the instance
			}
		}
	}
	out := make([]model.GPUInfo, 0, len(fresh)+len(kept))
	taken := map[int]bool{}
	for _, g := range kept {
		taken[g.Index] = true
	}
	for _, g := range fresh {
		if taken[g.Index] {
			logger.Info("New GPU deferred: its index belongs to a missing GPU that a claim still uses", "gpu", g.UUID, "index", g.Index)
			continue
		}
		out = append(out, g)
	}
	out = append(out, kept...)
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	if len(missing) == 0 {
		missing = nil
	}
	return out, missing
}

func hasInstance(g model.GPUInfo, in model.MIGInstance) bool {
	for _, x := range g.MIGInstances {
		if x.GIID == in.GIID && x.CIID == in.CIID {
			return true
		}
	}
	return false
}
