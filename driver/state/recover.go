package state

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// recover rolls back interrupted claims and, in dynamic MIG mode, destroys every MIG instance that
// no completed claim owns.
func (s *State) recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	changed := false
	for uid, c := range s.data.Claims {
		if c.State == checkpoint.PrepareCompleted {
			continue
		}
		logger.Info("Rolling back interrupted prepare", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid)
		if err := s.cfg.CDI.Remove(uid); err != nil {
			return err
		}
		delete(s.data.Claims, uid)
		changed = true
	}
	// Claims without MIG instances are not checkpointed before their CDI spec is written (nothing
	// else could leak), so a crash can leave an orphaned spec: remove it.
	uids, err := s.cfg.CDI.ClaimUIDs()
	if err != nil {
		return err
	}
	for _, uid := range uids {
		if _, ok := s.data.Claims[uid]; !ok {
			logger.Info("Removing orphaned CDI spec", "uid", uid)
			if err := s.cfg.CDI.Remove(uid); err != nil {
				return err
			}
		}
	}
	if s.cfg.Slices.MIG == "" || s.cfg.Slices.MIG == slices.MIGDynamic {
		gpus, err := nvml.Inventory(ctx, s.cfg.Backend)
		if err != nil {
			return fmt.Errorf("inventory: %w", err)
		}
		owned := s.ownedInstances()
		for _, g := range gpus {
			for _, in := range g.MIGInstances {
				if owned[instanceKey{g.UUID, in.GIID}] {
					continue
				}
				logger.Info("Destroying MIG instance no completed claim owns", "gpu", g.UUID, "gi", in.GIID, "profile", in.ProfileID, "start", in.Placement.Start)
				if err := s.cfg.Backend.DestroyMIG(ctx, g.UUID, in.GIID); err != nil && !errors.Is(err, nvml.ErrNotFound) {
					return fmt.Errorf("cleanup: %w", err)
				}
			}
		}
	}
	if changed {
		return s.cfg.Store.Save(s.data)
	}
	return nil
}
