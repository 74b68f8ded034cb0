// Package state is the driver's single state object: every prepare, unprepare, inventory refresh
// and start-up recovery goes through it under one mutex, and every change is checkpointed before
// and after the devices are touched. Invariants: a MIG instance created by the driver, a time
// slice it set and an MPS daemon it started are always recorded in the checkpoint (as the plan
// of a PrepareStarted claim, or as part of a PrepareCompleted claim) before they can exist, so a
// crash can never leak them; and a device that a recorded claim uses is always published.
package state

import (
	"context"
	"errors"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/sharing"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// Config wires a State.
type Config struct {
	// DriverName is the DRA driver name; allocation results and configs of other drivers are
	// ignored, and it is the domain of the taints the state adds.
	DriverName string
	// NodeName is the pool name.
	NodeName string
	// Backend is the NVML backend.
	Backend *nvml.Backend
	// CDI writes claim specs.
	CDI *cdi.Writer
	// Store is the checkpoint.
	Store *checkpoint.Store
	// Slices are the layout options (MIG mode, profiles, compat attributes).
	Slices slices.Options
	// Sharing applies time slices and runs MPS daemons; nil (or tools without a path) validates
	// sharing configs without applying them (mock NVML without stand-ins).
	Sharing *sharing.Tools
	// Inventory reads the device model; nil uses nvml.Inventory on Backend.
	Inventory func(ctx context.Context) ([]model.GPUInfo, error)
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
	// missing are GPUs (by UUID) that the inventory no longer reports but a recorded claim uses:
	// they stay published, tainted, until the claim is gone.
	missing map[string]bool
	data    checkpoint.Data
	// hook, when set, runs after PrepareStarted is checkpointed and the first MIG instance is
	// created: tests and the debug endpoint use it to stop a prepare halfway.
	hook func(ctx context.Context, claimUID string)
}

// New loads the checkpoint (recovering from corruption), takes the inventory and rolls back
// everything that no completed claim owns.
func New(ctx context.Context, cfg Config) (*State, error) {
	logger := klog.FromContext(ctx)
	if cfg.Inventory == nil {
		b := cfg.Backend
		cfg.Inventory = func(ctx context.Context) ([]model.GPUInfo, error) { return nvml.Inventory(ctx, b) }
	}
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
		// Devices, CDI specs, MPS daemons and time slices do not survive a reboot: roll every claim
		// back, the kubelet prepares the claims of running pods again.
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
	gpus, err := cfg.Inventory(ctx)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	s.gpus = s.withoutOwnedInstances(gpus)
	s.repairCDI(ctx)
	s.ensureMPS(ctx)
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

// TaintMissing is the key (after the driver's domain) of the taint on GPUs that the inventory no
// longer reports while a claim still uses them.
const TaintMissing = "gpu-missing"

// Resources returns the slices to publish, with the given health taints. Dynamic MIG profiles of
// recorded claims are published whatever the profile selection, so that the scheduler keeps
// accounting for the devices claims hold.
func (s *State) Resources(taints map[string][]resourceapi.DeviceTaint) resourceslice.DriverResources {
	s.mu.Lock()
	defer s.mu.Unlock()
	opts := s.cfg.Slices
	opts.Profiles = s.withHeldProfiles(opts.Profiles, opts.ExactProfiles)
	opts.Taints = map[string][]resourceapi.DeviceTaint{}
	for u, t := range taints {
		opts.Taints[u] = t
	}
	for u := range s.missing {
		opts.Taints[u] = append(opts.Taints[u], resourceapi.DeviceTaint{Key: s.cfg.DriverName + "/" + TaintMissing, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return slices.Build(s.cfg.NodeName, s.gpus, opts)
}

// withHeldProfiles adds to a profile selection the profiles of the dynamic MIG devices recorded
// claims hold (an empty selection that is not exact publishes every profile already).
func (s *State) withHeldProfiles(profiles []string, exact bool) []string {
	if len(profiles) == 0 && !exact {
		return nil
	}
	out := append([]string(nil), profiles...)
	seen := map[string]bool{}
	for _, p := range profiles {
		seen[p] = true
	}
	for _, c := range s.data.Claims {
		for _, d := range c.Devices {
			if !d.Dynamic || d.MIGProfileID == nil {
				continue
			}
			for _, g := range s.gpus {
				if g.UUID != d.GPUUUID {
					continue
				}
				if p, ok := g.Profile(*d.MIGProfileID); ok && !seen[p.Name] {
					seen[p.Name] = true
					out = append(out, p.Name)
				}
			}
		}
	}
	return out
}

// SetProfiles changes the dynamic MIG profile selection (nil: every profile) and reports whether
// it changed.
func (s *State) SetProfiles(profiles []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if equalStrings(s.cfg.Slices.Profiles, profiles) {
		return false
	}
	s.cfg.Slices.Profiles = append([]string(nil), profiles...)
	return true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Claims returns a copy of the checkpointed claims.
func (s *State) Claims() map[string]checkpoint.Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Clone().Claims
}

// Health returns the recorded health of the GPUs.
func (s *State) Health() map[string]checkpoint.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Clone().Health
}

// SetHealth records the health of the GPUs in the checkpoint, so that taints survive a restart.
func (s *State) SetHealth(h map[string]checkpoint.Health) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(h) == 0 {
		h = nil
	}
	s.data.Health = h
	if err := s.cfg.Store.Save(s.data); err != nil {
		return fmt.Errorf("checkpoint health: %w", err)
	}
	return nil
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
