package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/sharing"
	driverslices "github.com/neuronetes/neuronetes/driver/slices"
)

// cdiDevice is the CDI spec entry of a prepared device. It is built from the checkpointed device,
// the claim's MPS daemons and the GPU model alone, so that Prepare and repairCDI write the same
// spec. A device served by an MPS daemon gets the daemon's pipe and log directories.
func (s *State) cdiDevice(d checkpoint.Device, gpu model.GPUInfo, daemons []checkpoint.MPSDaemon) cdi.Device {
	dev := cdi.Device{Name: d.Name, UUID: d.GPUUUID, Env: append([]string(nil), d.Env...)}
	desc := cdi.Description{Index: gpu.Index, ProductName: gpu.ProductName, UUID: d.GPUUUID}
	if d.MIG != nil {
		dev.UUID = d.MIG.UUID
		desc.MIGUUID = d.MIG.UUID
		if p, ok := gpu.Profile(d.MIG.ProfileID); ok {
			desc.Profile = p.Name
		}
	}
	dev.Description = &desc
	dev.DeviceNodes = []string{fmt.Sprintf("/dev/nvidia%d", gpu.Minor)}
	for _, m := range daemons {
		if !slices.Contains(m.Devices, d.Name) || s.cfg.Sharing == nil {
			continue
		}
		sd := daemon(m)
		dev.Env = append(dev.Env, "CUDA_MPS_PIPE_DIRECTORY="+sharing.ContainerPipeDir, "CUDA_MPS_LOG_DIRECTORY="+sharing.ContainerLogDir)
		dev.Mounts = append(dev.Mounts,
			cdi.Mount{HostPath: sd.PipeDir(s.cfg.Sharing.MPSRoot), ContainerPath: sharing.ContainerPipeDir},
			cdi.Mount{HostPath: sd.LogDir(s.cfg.Sharing.MPSRoot), ContainerPath: sharing.ContainerLogDir})
	}
	return dev
}

// repairCDI rewrites the CDI spec of every completed claim whose spec file is missing. The
// checkpoint is the only durable record of a prepare: specs are written atomically (temp file and
// rename) but not fsynced, and this start-up repair is what makes that safe. After a reboot there
// is nothing to repair (every claim is rolled back), so it covers specs lost otherwise, e.g.
// deleted by hand or by a tmpfs cleanup. A spec that cannot be rebuilt is logged, never fatal: the
// driver must start to serve the other claims.
func (s *State) repairCDI(ctx context.Context) {
	logger := klog.FromContext(ctx)
	byUUID := make(map[string]model.GPUInfo, len(s.gpus))
	for _, g := range s.gpus {
		byUUID[g.UUID] = g
	}
	for uid, c := range s.data.Claims {
		if c.State != checkpoint.PrepareCompleted {
			continue
		}
		if _, err := os.Stat(s.cfg.CDI.Path(uid)); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := s.rebuildSpec(c, byUUID); err != nil {
			logger.Error(err, "Rebuilding a missing CDI spec failed", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid)
			continue
		}
		logger.Info("Rebuilt missing CDI spec from the checkpoint", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid)
	}
}

func (s *State) rebuildSpec(c checkpoint.Claim, byUUID map[string]model.GPUInfo) error {
	devs := make([]cdi.Device, 0, len(c.Devices))
	for _, d := range c.Devices {
		g, ok := byUUID[d.GPUUUID]
		if !ok {
			return fmt.Errorf("device %s: gpu %s is not in the inventory", d.Name, d.GPUUUID)
		}
		devs = append(devs, s.cdiDevice(d, g, c.MPS))
	}
	ids, err := s.cfg.CDI.Write(c.UID, devs)
	if err != nil {
		return err
	}
	for i, d := range c.Devices {
		if !slices.Equal(ids[i], d.CDIDeviceIDs) {
			return fmt.Errorf("device %s: rebuilt spec has CDI ids %v, the kubelet was given %v", d.Name, ids[i], d.CDIDeviceIDs)
		}
	}
	return nil
}

// recover rolls back interrupted claims (their MPS daemons, time slices and CDI specs), stops the
// MPS daemons no completed claim owns and, in dynamic MIG mode, destroys every MIG instance that
// no completed claim owns.
func (s *State) recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	changed := false
	for uid, c := range s.data.Claims {
		if c.State == checkpoint.PrepareCompleted {
			continue
		}
		logger.Info("Rolling back interrupted prepare", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid)
		if err := s.undoSharing(ctx, c); err != nil {
			return err
		}
		if err := s.cfg.CDI.Remove(uid); err != nil {
			return err
		}
		delete(s.data.Claims, uid)
		changed = true
	}
	if err := s.stopOrphanedMPS(ctx); err != nil {
		return err
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
	if s.cfg.Slices.MIG == "" || s.cfg.Slices.MIG == driverslices.MIGDynamic {
		gpus, err := s.cfg.Inventory(ctx)
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

// stopOrphanedMPS stops the MPS daemons whose directory no completed claim records (a crash
// after a daemon started but before its claim completed) and removes their directories.
func (s *State) stopOrphanedMPS(ctx context.Context) error {
	ids, err := s.cfg.Sharing.DaemonIDs()
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	for _, c := range s.data.Claims {
		for _, m := range c.MPS {
			owned[m.ID] = true
		}
	}
	for _, id := range ids {
		if owned[id] {
			continue
		}
		klog.FromContext(ctx).Info("Stopping MPS daemon no claim owns", "daemon", id)
		if err := s.cfg.Sharing.StopMPS(ctx, sharing.Daemon{ID: id}); err != nil {
			return err
		}
	}
	return nil
}
