package state

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/config"
	"github.com/neuronetes/neuronetes/driver/sharing"
)

// applySharing sets the time slices and starts the MPS daemons of a claim whose devices exist.
// Without a configured tool (mock NVML without stand-ins) the setting is logged as not applied
// and dropped from the record, so nothing is undone or mounted for it later.
func (s *State) applySharing(ctx context.Context, rec *checkpoint.Claim, mps map[string]*config.MPS) error {
	logger := klog.FromContext(ctx)
	for i := range rec.Devices {
		d := &rec.Devices[i]
		if d.TimeSlice == nil {
			continue
		}
		err := s.cfg.Sharing.SetTimeSlice(ctx, d.GPUUUID, config.TimeSlice(*d.TimeSlice))
		if errors.Is(err, sharing.ErrNotConfigured) {
			logger.Info("GPU time slice not applied: no nvidia-smi configured", "claim", klog.KRef(rec.Namespace, rec.Name), "device", d.Name, "timeSlice", config.TimeSlice(*d.TimeSlice))
			d.TimeSlice = nil
			continue
		}
		if err != nil {
			return fmt.Errorf("device %s: %w", d.Name, err)
		}
		s.data.Claims[rec.UID] = *rec
	}
	uuid := map[string]string{}
	for _, d := range rec.Devices {
		uuid[d.Name] = d.GPUUUID
		if d.MIG != nil {
			uuid[d.Name] = d.MIG.UUID
		}
	}
	// Until the loop ends the record keeps every planned daemon: a failure rolls back all of them
	// (stopping one that never started only removes its directory).
	var started []checkpoint.MPSDaemon
	for _, m := range rec.MPS {
		m.UUIDs = nil
		for _, n := range m.Devices {
			m.UUIDs = append(m.UUIDs, uuid[n])
		}
		limits, err := mps[m.ID].PinnedLimits(m.UUIDs)
		if err != nil {
			return fmt.Errorf("MPS config of devices %v: %w", m.Devices, err)
		}
		m.PinnedLimits = limits
		err = s.cfg.Sharing.StartMPS(ctx, daemon(m))
		if errors.Is(err, sharing.ErrNotConfigured) {
			logger.Info("MPS daemon not started: no nvidia-cuda-mps-control configured", "claim", klog.KRef(rec.Namespace, rec.Name), "devices", m.Devices)
			continue
		}
		if err != nil {
			return err
		}
		started = append(started, m)
	}
	rec.MPS = started
	s.data.Claims[rec.UID] = *rec
	return nil
}

func daemon(m checkpoint.MPSDaemon) sharing.Daemon {
	return sharing.Daemon{ID: m.ID, UUIDs: m.UUIDs, ActiveThreadPercentage: m.ActiveThreadPercentage, PinnedLimits: m.PinnedLimits, MultiUser: m.MultiUser}
}

// undoSharing stops the claim's MPS daemons and restores the default time slice of each GPU it
// set one on, unless another claim still uses that GPU.
func (s *State) undoSharing(ctx context.Context, c checkpoint.Claim) error {
	for _, m := range c.MPS {
		if err := s.cfg.Sharing.StopMPS(ctx, daemon(m)); err != nil {
			return err
		}
	}
	restored := map[string]bool{}
	for _, d := range c.Devices {
		if d.TimeSlice == nil || restored[d.GPUUUID] || s.gpuUsedByOther(d.GPUUUID, c.UID) {
			continue
		}
		err := s.cfg.Sharing.SetTimeSlice(ctx, d.GPUUUID, config.TimeSliceDefault)
		if err != nil && !errors.Is(err, sharing.ErrNotConfigured) {
			return fmt.Errorf("claim %s/%s: restore time slice: %w", c.Namespace, c.Name, err)
		}
		restored[d.GPUUUID] = true
	}
	return nil
}

// gpuUsedByOther reports whether a claim other than self has a device on the GPU.
func (s *State) gpuUsedByOther(gpuUUID, self string) bool {
	for uid, c := range s.data.Claims {
		if uid == self {
			continue
		}
		for _, d := range c.Devices {
			if d.GPUUUID == gpuUUID {
				return true
			}
		}
	}
	return false
}

// ensureMPS starts the daemon of every completed claim that does not answer: the daemons run
// inside the driver's container and end with it, so a restarted driver (or the new instance of a
// rolling update, once the old one is gone) starts them again with their recorded settings.
func (s *State) ensureMPS(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, c := range s.data.Claims {
		if c.State != checkpoint.PrepareCompleted {
			continue
		}
		for _, m := range c.MPS {
			if err := s.cfg.Sharing.MPSRunning(ctx, daemon(m)); err == nil || errors.Is(err, sharing.ErrNotConfigured) {
				continue
			}
			if err := s.cfg.Sharing.StartMPS(ctx, daemon(m)); err != nil {
				logger.Error(err, "Restarting an MPS daemon failed", "claim", klog.KRef(c.Namespace, c.Name), "daemon", m.ID)
				continue
			}
			logger.Info("Restarted MPS daemon", "claim", klog.KRef(c.Namespace, c.Name), "daemon", m.ID)
		}
	}
}

// EnsureMPS restarts the MPS daemons of completed claims that do not answer (see ensureMPS).
func (s *State) EnsureMPS(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reload(ctx)
	s.ensureMPS(ctx)
}
