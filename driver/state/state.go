// Package state is the driver's single state object: every prepare, unprepare and start-up
// recovery goes through it under one mutex, and every change is checkpointed before and after the
// devices are touched. Invariant: a MIG instance created by the driver is always recorded in the
// checkpoint (as a planned placement of a PrepareStarted claim, or as a created instance of a
// PrepareCompleted claim) before it can exist, so a crash can never leak it.
package state

import (
	"context"
	"errors"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// Config wires a State.
type Config struct {
	// DriverName is the DRA driver name; allocation results of other drivers are ignored.
	DriverName string
	// NodeName is the pool name.
	NodeName string
	// Backend is the NVML backend.
	Backend *nvml.Backend
	// CDI writes claim specs.
	CDI *cdi.Writer
	// Store is the checkpoint.
	Store *checkpoint.Store
	// Slices are the layout options (MIG mode, profiles).
	Slices slices.Options
	// Event, when set, reports notable events (e.g. a corrupt checkpoint) as Kubernetes Events.
	Event func(eventType, reason, message string)
}

// PreparedDevice is what the kubelet needs for one device of a claim.
type PreparedDevice struct {
	Requests     []string
	PoolName     string
	DeviceName   string
	CDIDeviceIDs []string
}

// State owns the device model and the prepared claims.
type State struct {
	cfg  Config
	mu   sync.Mutex
	gpus []model.GPUInfo
	data checkpoint.Data
	// hook, when set, runs after PrepareStarted is checkpointed and the first MIG instance is
	// created: tests and the debug endpoint use it to stop a prepare halfway.
	hook func(ctx context.Context, claimUID string)
}

// New loads the checkpoint (recovering from corruption), takes the inventory and rolls back
// everything that no completed claim owns.
func New(ctx context.Context, cfg Config) (*State, error) {
	logger := klog.FromContext(ctx)
	s := &State{cfg: cfg}
	data, bootID, err := cfg.Store.Load()
	if err != nil {
		if !errors.Is(err, checkpoint.ErrCorrupt) {
			return nil, err
		}
		moved, qerr := cfg.Store.Quarantine()
		msg := fmt.Sprintf("checkpoint %s is unusable (%v); moved to %s and starting from an empty state", cfg.Store.Path, err, moved)
		if qerr != nil {
			msg = fmt.Sprintf("checkpoint %s is unusable (%v) and could not be moved aside (%v); starting from an empty state", cfg.Store.Path, err, qerr)
		}
		logger.Error(err, "Recovering from a corrupt checkpoint", "path", cfg.Store.Path, "movedTo", moved)
		s.event("Warning", "CheckpointCorrupt", msg)
		data = checkpoint.Data{Claims: map[string]checkpoint.Claim{}}
		bootID = cfg.Store.BootID
	}
	if bootID != cfg.Store.BootID && len(data.Claims) > 0 {
		// Devices and CDI specs do not survive a reboot: roll every claim back, the kubelet
		// prepares the claims of running pods again.
		logger.Info("Checkpoint is from an earlier boot, rolling back its claims", "checkpointBootID", bootID, "bootID", cfg.Store.BootID)
		for uid, c := range data.Claims {
			c.State = checkpoint.PrepareStarted
			data.Claims[uid] = c
		}
	}
	s.data = data
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	gpus, err := nvml.Inventory(ctx, cfg.Backend)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	s.gpus = s.withoutOwnedInstances(gpus)
	s.repairCDI(ctx)
	return s, nil
}

func (s *State) event(eventType, reason, msg string) {
	if s.cfg.Event != nil {
		s.cfg.Event(eventType, reason, msg)
	}
}

// SetHook installs the mid-prepare hook (nil removes it).
func (s *State) SetHook(h func(ctx context.Context, claimUID string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// GPUs returns the device model the slices are built from.
func (s *State) GPUs() []model.GPUInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]model.GPUInfo(nil), s.gpus...)
}

// Resources returns the slices to publish, with the given taints.
func (s *State) Resources(taints map[string][]resourceapi.DeviceTaint) resourceslice.DriverResources {
	s.mu.Lock()
	defer s.mu.Unlock()
	opts := s.cfg.Slices
	opts.Taints = taints
	return slices.Build(s.cfg.NodeName, s.gpus, opts)
}

// Claims returns a copy of the checkpointed claims.
func (s *State) Claims() map[string]checkpoint.Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]checkpoint.Claim, len(s.data.Claims))
	for k, v := range s.data.Claims {
		out[k] = v
	}
	return out
}

// withoutOwnedInstances drops MIG instances owned by prepared claims from the model: they are the
// driver's dynamic instances, not static devices to publish.
func (s *State) withoutOwnedInstances(gpus []model.GPUInfo) []model.GPUInfo {
	owned := s.ownedInstances()
	for i := range gpus {
		var keep []model.MIGInstance
		for _, in := range gpus[i].MIGInstances {
			if !owned[instanceKey{gpus[i].UUID, in.GIID}] {
				keep = append(keep, in)
			}
		}
		gpus[i].MIGInstances = keep
	}
	return gpus
}

type instanceKey struct {
	gpu  string
	giID int
}

func (s *State) ownedInstances() map[instanceKey]bool {
	owned := map[instanceKey]bool{}
	for _, c := range s.data.Claims {
		if c.State != checkpoint.PrepareCompleted {
			continue
		}
		for _, d := range c.Devices {
			if d.Dynamic && d.MIG != nil {
				owned[instanceKey{d.GPUUUID, d.MIG.GIID}] = true
			}
		}
	}
	return owned
}

// Prepare prepares one claim. It is idempotent: a completed claim returns its recorded devices.
// Errors that the user can fix (bad opaque config, device in use) are returned as is, so the
// kubelet shows them on the pod.
func (s *State) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]PreparedDevice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	logger := klog.FromContext(ctx)
	s.reload(ctx)
	uid := string(claim.UID)
	if c, ok := s.data.Claims[uid]; ok {
		if c.State == checkpoint.PrepareCompleted {
			return toPrepared(c), nil
		}
		// An earlier attempt failed halfway: undo it, then start over.
		if err := s.rollback(ctx, c); err != nil {
			return nil, err
		}
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s: not allocated", claim.Namespace, claim.Name)
	}
	configs, err := s.configs(claim)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	rec := checkpoint.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: checkpoint.PrepareStarted}
	refs := map[string]slices.Ref{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != s.cfg.DriverName || r.Pool != s.cfg.NodeName {
			continue
		}
		ref, err := slices.Resolve(s.gpus, s.cfg.Slices, r.Device)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s request %s: %w", claim.Namespace, claim.Name, r.Request, err)
		}
		adminAccess := r.AdminAccess != nil && *r.AdminAccess
		if !adminAccess {
			if other := s.userOf(r.Device, ref, uid); other != "" {
				return nil, fmt.Errorf("claim %s/%s: device %s is in use by claim %s", claim.Namespace, claim.Name, r.Device, other)
			}
		}
		d := checkpoint.Device{Requests: []string{r.Request}, Pool: r.Pool, Name: r.Device, GPUUUID: ref.GPU.UUID}
		switch ref.Kind {
		case slices.KindDynamicMIG:
			pid, pl := ref.Profile.ID, ref.Placement
			d.MIGProfileID, d.Placement, d.Dynamic = &pid, &pl, true
		case slices.KindStaticMIG:
			in := ref.Instance
			d.MIG = &in
		}
		refs[r.Device] = ref
		rec.Devices = append(rec.Devices, d)
	}
	s.data.Claims[uid] = rec
	// PrepareStarted is recorded before any MIG instance is created, as an intent without fsync:
	// if a crash loses it, the start-up sweep destroys the unowned instance anyway. Claims that
	// create no instance skip it (their only side effect, the CDI spec, is garbage-collected at
	// start-up).
	if createsMIG(rec) {
		if err := s.cfg.Store.SaveIntent(s.data); err != nil {
			delete(s.data.Claims, uid)
			return nil, fmt.Errorf("checkpoint PrepareStarted: %w", err)
		}
	}
	hooked := false
	cdiDevs := make([]cdi.Device, 0, len(rec.Devices))
	for i := range rec.Devices {
		d := &rec.Devices[i]
		ref := refs[d.Name]
		d.Env = configs.env(d.Requests[0])
		switch {
		case d.Dynamic:
			in, err := s.cfg.Backend.CreateMIG(ctx, ref.GPU.UUID, ref.Profile.ID, ref.Placement)
			if err != nil {
				s.failPrepare(ctx, uid)
				return nil, fmt.Errorf("claim %s/%s device %s: %w", claim.Namespace, claim.Name, d.Name, err)
			}
			d.MIG = &in
			s.data.Claims[uid] = rec
			if s.hook != nil && !hooked {
				hooked = true
				s.hook(ctx, uid)
			}
		case d.MIG != nil:
			// A static MIG instance: it exists already and is not the driver's to check or create.
		default:
			if err := s.wholeGPUFree(ctx, ref.GPU.UUID); err != nil {
				s.failPrepare(ctx, uid)
				return nil, fmt.Errorf("claim %s/%s device %s: %w", claim.Namespace, claim.Name, d.Name, err)
			}
		}
		cdiDevs = append(cdiDevs, cdiDevice(*d, ref.GPU))
	}
	if s.hook != nil && !hooked {
		s.hook(ctx, uid)
	}
	ids, err := s.cfg.CDI.Write(uid, cdiDevs)
	if err != nil {
		s.failPrepare(ctx, uid)
		return nil, err
	}
	for i := range rec.Devices {
		rec.Devices[i].CDIDeviceIDs = ids[i]
	}
	rec.State = checkpoint.PrepareCompleted
	s.data.Claims[uid] = rec
	if err := s.cfg.Store.Save(s.data); err != nil {
		s.failPrepare(ctx, uid)
		return nil, fmt.Errorf("checkpoint PrepareCompleted: %w", err)
	}
	logger.V(2).Info("Prepared claim", "claim", klog.KObj(claim), "devices", len(rec.Devices))
	return toPrepared(rec), nil
}

// reload re-reads the checkpoint before a call. During a rolling update two driver instances are
// registered and the kubelet may prepare a claim in one and unprepare it in the other; the plugin
// library serializes their calls with a file lock, so the checkpoint on disk is the shared truth.
// A checkpoint that cannot be read keeps the in-memory state.
func (s *State) reload(ctx context.Context) {
	d, _, err := s.cfg.Store.Load()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Re-reading the checkpoint failed, using the in-memory state")
		return
	}
	s.data = d
}

// failPrepare undoes a failed prepare; the claim stays PrepareStarted in the checkpoint if the undo
// fails, so start-up recovery finishes it.
func (s *State) failPrepare(ctx context.Context, uid string) {
	if err := s.rollback(ctx, s.data.Claims[uid]); err != nil {
		klog.FromContext(ctx).Error(err, "Rolling back failed prepare", "uid", uid)
	}
}

// rollback destroys what a claim created, removes its CDI spec and forgets it.
func (s *State) rollback(ctx context.Context, c checkpoint.Claim) error {
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
	return s.cfg.Store.Save(s.data)
}

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

// userOf returns the UID of another claim that uses the device or, for a whole GPU, any part of
// it (and vice versa); "" when it is free.
func (s *State) userOf(device string, ref slices.Ref, self string) string {
	for uid, c := range s.data.Claims {
		if uid == self {
			continue
		}
		for _, d := range c.Devices {
			if d.Name == device {
				return uid
			}
			sameGPU := d.GPUUUID == ref.GPU.UUID
			if sameGPU && (ref.Kind == slices.KindGPU || (d.MIG == nil && !d.Dynamic)) {
				return uid
			}
		}
	}
	return ""
}

// wholeGPUFree checks that no MIG instance exists on a GPU handed out whole.
func (s *State) wholeGPUFree(ctx context.Context, gpuUUID string) error {
	if s.cfg.Slices.MIG == slices.MIGStatic {
		return nil
	}
	n, err := s.cfg.Backend.MIGInstanceCount(ctx, gpuUUID)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("gpu %s has %d MIG instances and cannot be used whole", gpuUUID, n)
	}
	return nil
}

func createsMIG(c checkpoint.Claim) bool {
	for _, d := range c.Devices {
		if d.Dynamic {
			return true
		}
	}
	return false
}

func toPrepared(c checkpoint.Claim) []PreparedDevice {
	out := make([]PreparedDevice, 0, len(c.Devices))
	for _, d := range c.Devices {
		out = append(out, PreparedDevice{Requests: d.Requests, PoolName: d.Pool, DeviceName: d.Name, CDIDeviceIDs: d.CDIDeviceIDs})
	}
	return out
}
