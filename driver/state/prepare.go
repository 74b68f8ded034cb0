package state

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/config"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// plan is what a prepare will do: the claim record to checkpoint first, what each device resolves
// to, and the MPS settings of each daemon.
type plan struct {
	rec  checkpoint.Claim
	refs map[string]slices.Ref
	mps  map[string]*config.MPS
}

// Prepare prepares one claim. It is idempotent: a completed claim returns its recorded devices.
// Errors that the user can fix (bad opaque config, device in use) are returned as is, so the
// kubelet shows them on the pod.
func (s *State) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]PreparedDevice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	p, err := s.plan(claim)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	rec := p.rec
	s.data.Claims[uid] = rec
	// PrepareStarted is recorded before any MIG instance, time slice or MPS daemon exists, as an
	// intent without fsync: if a crash loses it, the start-up sweep destroys the unowned MIG
	// instance and MPS directory anyway. Claims without side effects skip it (their only one, the
	// CDI spec, is garbage-collected at start-up).
	if hasSideEffects(rec) {
		if err := s.cfg.Store.SaveIntent(s.data); err != nil {
			delete(s.data.Claims, uid)
			return nil, fmt.Errorf("checkpoint PrepareStarted: %w", err)
		}
	}
	fail := func(err error) ([]PreparedDevice, error) {
		s.failPrepare(ctx, uid)
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	if err := s.createDevices(ctx, &rec, p.refs); err != nil {
		return fail(err)
	}
	if err := s.applySharing(ctx, &rec, p.mps); err != nil {
		return fail(err)
	}
	cdiDevs := make([]cdi.Device, 0, len(rec.Devices))
	for _, d := range rec.Devices {
		cdiDevs = append(cdiDevs, s.cdiDevice(d, p.refs[d.Name].GPU, rec.MPS))
	}
	ids, err := s.cfg.CDI.Write(uid, cdiDevs)
	if err != nil {
		return fail(err)
	}
	for i := range rec.Devices {
		rec.Devices[i].CDIDeviceIDs = ids[i]
	}
	rec.State = checkpoint.PrepareCompleted
	s.data.Claims[uid] = rec
	if err := s.cfg.Store.Save(s.data); err != nil {
		return fail(fmt.Errorf("checkpoint PrepareCompleted: %w", err))
	}
	klog.FromContext(ctx).V(2).Info("Prepared claim", "claim", klog.KObj(claim), "devices", len(rec.Devices), "mpsDaemons", len(rec.MPS))
	return toPrepared(rec), nil
}

// plan resolves the claim's devices for this driver and node, refuses devices in use, and decides
// the config of every device: its environment, time slice and MPS daemon.
func (s *State) plan(claim *resourceapi.ResourceClaim) (plan, error) {
	uid := string(claim.UID)
	p := plan{
		rec:  checkpoint.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: checkpoint.PrepareStarted},
		refs: map[string]slices.Ref{},
		mps:  map[string]*config.MPS{},
	}
	entries, err := s.decodeConfigs(claim)
	if err != nil {
		return p, err
	}
	// Any device the node has resolves, whatever profiles are published now: the allocation may
	// predate a change of the selection.
	resolveOpts := s.cfg.Slices
	resolveOpts.Profiles, resolveOpts.ExactProfiles = nil, false
	daemons := map[int]int{} // entry position -> index in rec.MPS
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != s.cfg.DriverName || r.Pool != s.cfg.NodeName {
			continue
		}
		ref, err := slices.Resolve(s.gpus, resolveOpts, r.Device)
		if err != nil {
			return p, fmt.Errorf("request %s: %w", r.Request, err)
		}
		adminAccess := r.AdminAccess != nil && *r.AdminAccess
		if !adminAccess {
			if other := s.userOf(r.Device, ref, uid); other != "" {
				return p, fmt.Errorf("device %s is in use by claim %s", r.Device, other)
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
		at, err := pick(entries, r.Request, r.Device, deviceType(ref.Kind))
		if err != nil {
			return p, err
		}
		if at >= 0 {
			if err := s.configure(&p, &d, ref, entries[at], uid, daemons, at); err != nil {
				return p, err
			}
		}
		p.refs[r.Device] = ref
		p.rec.Devices = append(p.rec.Devices, d)
	}
	return p, nil
}

// configure applies the settings of config e to device d of the plan: environment, time slice
// (whole GPUs only; another claim on the GPU must not have set a different one) and membership
// of the MPS daemon of e.
func (s *State) configure(p *plan, d *checkpoint.Device, ref slices.Ref, e entry, uid string, daemons map[int]int, at int) error {
	st := e.settings
	d.Env = append([]string(nil), st.Env...)
	if st.TimeSlice != nil {
		if ref.Kind != slices.KindGPU {
			return fmt.Errorf("config[%d] %s: device %s is a MIG device; a time slice applies to whole GPUs only", e.index, st.TimeSliceField, d.Name)
		}
		if other, ts := s.timeSliceOf(d.GPUUUID, uid); other != "" && ts != int(*st.TimeSlice) {
			return fmt.Errorf("config[%d] %s: GPU %s runs time slice %s for claim %s", e.index, st.TimeSliceField, d.GPUUUID, config.TimeSlice(ts), other)
		}
		v := int(*st.TimeSlice)
		d.TimeSlice = &v
	}
	if st.MPS != nil {
		i, ok := daemons[at]
		if !ok {
			i = len(p.rec.MPS)
			daemons[at] = i
			id := fmt.Sprintf("%s-%d", uid, e.index)
			p.rec.MPS = append(p.rec.MPS, checkpoint.MPSDaemon{ID: id, ActiveThreadPercentage: st.MPS.ActiveThreadPercentage, MultiUser: st.MPS.MultiUser})
			p.mps[id] = st.MPS
		}
		p.rec.MPS[i].Devices = append(p.rec.MPS[i].Devices, d.Name)
	}
	return nil
}

// timeSliceOf returns another claim that set a time slice on the GPU, and that time slice.
func (s *State) timeSliceOf(gpuUUID, self string) (string, int) {
	for uid, c := range s.data.Claims {
		if uid == self {
			continue
		}
		for _, d := range c.Devices {
			if d.GPUUUID == gpuUUID && d.TimeSlice != nil {
				return uid, *d.TimeSlice
			}
		}
	}
	return "", 0
}

// createDevices creates the dynamic MIG instances of the claim and checks that whole GPUs have
// none; rec is updated (and kept in s.data) as instances appear.
func (s *State) createDevices(ctx context.Context, rec *checkpoint.Claim, refs map[string]slices.Ref) error {
	hooked := false
	for i := range rec.Devices {
		d := &rec.Devices[i]
		ref := refs[d.Name]
		switch {
		case d.Dynamic:
			in, err := s.cfg.Backend.CreateMIG(ctx, ref.GPU.UUID, ref.Profile.ID, ref.Placement)
			if err != nil {
				return fmt.Errorf("device %s: %w", d.Name, err)
			}
			d.MIG = &in
			s.data.Claims[rec.UID] = *rec
			if s.hook != nil && !hooked {
				hooked = true
				s.hook(ctx, rec.UID)
			}
		case d.MIG != nil:
			// A static MIG instance: it exists already and is not the driver's to check or create.
		default:
			if err := s.wholeGPUFree(ctx, ref.GPU.UUID); err != nil {
				return fmt.Errorf("device %s: %w", d.Name, err)
			}
		}
	}
	if s.hook != nil && !hooked {
		s.hook(ctx, rec.UID)
	}
	return nil
}

// failPrepare undoes a failed prepare; the claim stays PrepareStarted in the checkpoint if the undo
// fails, so start-up recovery finishes it.
func (s *State) failPrepare(ctx context.Context, uid string) {
	if err := s.rollback(ctx, s.data.Claims[uid]); err != nil {
		klog.FromContext(ctx).Error(err, "Rolling back failed prepare", "uid", uid)
	}
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

func hasSideEffects(c checkpoint.Claim) bool {
	if len(c.MPS) > 0 {
		return true
	}
	for _, d := range c.Devices {
		if d.Dynamic || d.TimeSlice != nil {
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
