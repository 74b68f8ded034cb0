package state

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
)

// Unprepare undoes Prepare. A claim that is not prepared is not an error.
func (s *State) Unprepare(ctx context.Context, uid types.UID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reload(ctx)
	c, ok := s.data.Claims[string(uid)]
	if !ok {
		return nil
	}
	if err := s.rollback(ctx, c); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Unprepared claim", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid)
	return nil
}

// rollback undoes what a claim did (MPS daemons, time slices, MIG instances, CDI spec) and
// forgets it. Every step tolerates what is already undone, so a rollback can be repeated.
func (s *State) rollback(ctx context.Context, c checkpoint.Claim) error {
	if err := s.undoSharing(ctx, c); err != nil {
		return err
	}
	for _, d := range c.Devices {
		if !d.Dynamic {
			continue
		}
		giID := -1
		if d.MIG != nil {
			giID = d.MIG.GIID
		} else if d.Placement != nil && d.MIGProfileID != nil {
			// Created but not yet recorded: find it by its planned placement.
			g, err := s.cfg.Backend.GPU(ctx, d.GPUUUID)
			if err != nil {
				return err
			}
			for _, in := range g.MIGInstances {
				if in.ProfileID == *d.MIGProfileID && in.Placement == *d.Placement && !s.ownedInstances()[instanceKey{d.GPUUUID, in.GIID}] {
					giID = in.GIID
				}
			}
		}
		if giID < 0 {
			continue
		}
		if err := s.cfg.Backend.DestroyMIG(ctx, d.GPUUUID, giID); err != nil && !errors.Is(err, nvml.ErrNotFound) {
			return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	if err := s.cfg.CDI.Remove(c.UID); err != nil {
		return err
	}
	delete(s.data.Claims, c.UID)
	s.forgetMissing()
	return s.cfg.Store.Save(s.data)
}

// forgetMissing stops publishing missing GPUs that no recorded claim uses any more.
func (s *State) forgetMissing() {
	if len(s.missing) == 0 {
		return
	}
	used := map[string]bool{}
	for _, c := range s.data.Claims {
		for _, d := range c.Devices {
			used[d.GPUUUID] = true
		}
	}
	var keep []int
	for i, g := range s.gpus {
		if s.missing[g.UUID] && !used[g.UUID] {
			delete(s.missing, g.UUID)
			continue
		}
		keep = append(keep, i)
	}
	gpus := make([]model.GPUInfo, 0, len(keep))
	for _, i := range keep {
		gpus = append(gpus, s.gpus[i])
	}
	s.gpus = gpus
	if len(s.missing) == 0 {
		s.missing = nil
	}
}
