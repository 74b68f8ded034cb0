package state

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/sharing"
)

const node = "node-a"

type env struct {
	dir    string
	events []string
	// inventory, when set, replaces the backend's inventory (hot-plug tests).
	inventory func(ctx context.Context) ([]model.GPUInfo, error)
}

func (e *env) open(t *testing.T, bootID string) (*State, *nvml.Backend) {
	t.Helper()
	return e.openWith(t, bootID, nil)
}

// openWith opens the state with the given sharing tools (nil: sharing not applied).
func (e *env) openWith(t *testing.T, bootID string, tools *sharing.Tools) (*State, *nvml.Backend) {
	t.Helper()
	b, err := nvml.Open("mock:dgxh100", nvml.Options{StateFile: filepath.Join(e.dir, "mock.json")})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cdi.NewWriter(filepath.Join(e.dir, "cdi"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Config{
		DriverName: model.DriverName, NodeName: node, Backend: b, CDI: w,
		Store:   &checkpoint.Store{Path: filepath.Join(e.dir, "checkpoint.json"), BootID: bootID},
		Sharing: tools, Inventory: e.inventory,
		Event: func(_, reason, msg string) { e.events = append(e.events, reason+": "+msg) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func claim(uid string, devices []string, configs ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "ns", UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: model.DriverName, Pool: node, Device: d})
	}
	for _, raw := range configs {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: model.DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}},
		})
	}
	return c
}

func migCount(t *testing.T, b *nvml.Backend) int {
	t.Helper()
	gpus, err := nvml.Inventory(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range gpus {
		n += len(g.MIGInstances)
	}
	return n
}

func TestPrepareUnprepare(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, b := e.open(t, "boot")
	ctx := context.Background()
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		errHas  string
		migs    int
		envHas  string
		devices int
	}{
		{"whole gpu", claim("u1", []string{"gpu-0"}), "", 0, "NVIDIA_VISIBLE_DEVICES=GPU-", 1},
		{"dynamic mig", claim("u2", []string{"gpu-1-mig-1g-10gb-p0"}), "", 1, "NVIDIA_VISIBLE_DEVICES=MIG-", 1},
		{"two migs one gpu", claim("u3", []string{"gpu-1-mig-1g-10gb-p1", "gpu-1-mig-3g-40gb-p4"}), "", 3, "MIG-", 2},
		{"device in use", claim("u4", []string{"gpu-0"}), "in use by claim u1", 3, "", 0},
		{"whole gpu under a mig", claim("u5", []string{"gpu-1"}), "in use", 3, "", 0},
		{"overlapping placement", claim("u6", []string{"gpu-1-mig-2g-20gb-p0"}), "overlaps", 3, "", 0},
		{"unknown device", claim("u7", []string{"gpu-42"}), "no GPU with index 42", 3, "", 0},
		{"bad config", claim("u8", []string{"gpu-2"}, `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":500}}}`),
			"sharing.mps.defaultActiveThreadPercentage", 3, "", 0},
		{"good config", claim("u9", []string{"gpu-2"}, `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}}`),
			"", 3, "NEURONETES_GPU_TIMESLICE=Short", 1},
	}
	for _, tc := range tests {
		devs, err := s.Prepare(ctx, tc.claim)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.errHas)
			}
		} else if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if got := migCount(t, b); got != tc.migs {
			t.Errorf("%s: %d MIG instances, want %d", tc.name, got, tc.migs)
		}
		if len(devs) != tc.devices {
			t.Errorf("%s: %d devices, want %d", tc.name, len(devs), tc.devices)
		}
		if tc.envHas != "" {
			raw, _ := os.ReadFile(filepath.Join(e.dir, "cdi", "k8s.gpu.neuronetes.io-claim_"+string(tc.claim.UID)+".json"))
			if !strings.Contains(string(raw), tc.envHas) {
				t.Errorf("%s: CDI spec lacks %q: %s", tc.name, tc.envHas, raw)
			}
		}
	}
	// Idempotent prepare returns the same devices and creates nothing.
	again, err := s.Prepare(ctx, claim("u2", []string{"gpu-1-mig-1g-10gb-p0"}))
	if err != nil || len(again) != 1 || migCount(t, b) != 3 {
		t.Errorf("second prepare: %v %v, %d MIG", again, err, migCount(t, b))
	}
	for _, uid := range []string{"u1", "u2", "u3", "u9", "u3", "nope"} {
		if err := s.Unprepare(ctx, types.UID(uid)); err != nil {
			t.Errorf("unprepare %s: %v", uid, err)
		}
	}
	if n := migCount(t, b); n != 0 {
		t.Errorf("%d MIG instances left after unprepare", n)
	}
	if n := len(s.Claims()); n != 0 {
		t.Errorf("%d claims left: %v", n, s.Claims())
	}
	specs, _ := filepath.Glob(filepath.Join(e.dir, "cdi", "*"))
	if len(specs) != 0 {
		t.Errorf("CDI specs left: %v", specs)
	}
}

func TestConcurrentPrepare(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, b := e.open(t, "boot")
	var wg sync.WaitGroup
	errs := make(chan error, 14)
	// 7 claims race for the 7 1g.10gb placements of GPU 0 plus 7 for the same placements again:
	// exactly 7 may win.
	for i := 0; i < 14; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := s.Prepare(context.Background(), claim(string(rune('a'+i)), []string{model.DynamicMIGName(0, "1g.10gb", i%7)}))
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok != 7 || migCount(t, b) != 7 {
		t.Errorf("%d prepares succeeded, %d MIG instances; want 7 and 7", ok, migCount(t, b))
	}
}

func TestCrashMidPrepare(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, _ := e.open(t, "boot")
	if _, err := s.Prepare(context.Background(), claim("done", []string{"gpu-3-mig-1g-10gb-p2"})); err != nil {
		t.Fatal(err)
	}
	reached := make(chan struct{})
	s.SetHook(func(ctx context.Context, uid string) {
		close(reached)
		select {} // the "process" dies here: nothing after this point ever runs
	})
	go s.Prepare(context.Background(), claim("mid", []string{"gpu-3-mig-1g-10gb-p4", "gpu-3-mig-1g-10gb-p5"})) //nolint:errcheck
	<-reached
	// Restart: a new process with the same checkpoint and (persisted) hardware state.
	s2, b2 := e.open(t, "boot")
	if n := migCount(t, b2); n != 1 {
		t.Fatalf("after restart %d MIG instances, want only the completed claim's 1", n)
	}
	if _, ok := s2.Claims()["mid"]; ok {
		t.Errorf("interrupted claim still recorded")
	}
	// The kubelet retries: the claim now completes.
	if _, err := s2.Prepare(context.Background(), claim("mid", []string{"gpu-3-mig-1g-10gb-p4", "gpu-3-mig-1g-10gb-p5"})); err != nil {
		t.Fatal(err)
	}
	if n := migCount(t, b2); n != 3 {
		t.Errorf("after retry %d MIG instances, want 3", n)
	}
	// Restart again: completed claims keep their instances; the static model does not show them.
	s3, b3 := e.open(t, "boot")
	if n := migCount(t, b3); n != 3 {
		t.Errorf("completed claims lost instances on restart: %d", n)
	}
	for _, g := range s3.GPUs() {
		if len(g.MIGInstances) != 0 {
			t.Errorf("owned instances published as static: %v", g.MIGInstances)
		}
	}
}

func TestCorruptCheckpointAndReboot(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, _ := e.open(t, "boot-1")
	if _, err := s.Prepare(context.Background(), claim("x", []string{"gpu-0-mig-1g-10gb-p0"})); err != nil {
		t.Fatal(err)
	}
	// A reboot (new boot id) rolls back the claims of the old boot.
	s2, b2 := e.open(t, "boot-2")
	if len(s2.Claims()) != 0 || migCount(t, b2) != 0 {
		t.Errorf("after reboot: claims %v, %d MIG", s2.Claims(), migCount(t, b2))
	}
	if err := os.WriteFile(filepath.Join(e.dir, "checkpoint.json"), []byte(`{"version":"v1","data":{"claims":{}},"checksum":"bad"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s3, _ := e.open(t, "boot-2")
	if len(e.events) != 1 || !strings.HasPrefix(e.events[0], "CheckpointCorrupt") {
		t.Errorf("events = %v, want one CheckpointCorrupt", e.events)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "checkpoint.json.corrupt")); err != nil {
		t.Errorf("corrupt checkpoint not kept: %v", err)
	}
	if _, err := s3.Prepare(context.Background(), claim("y", []string{"gpu-0"})); err != nil {
		t.Errorf("prepare after recovery: %v", err)
	}
	d, boot, err := (&checkpoint.Store{Path: filepath.Join(e.dir, "checkpoint.json")}).Load()
	if err != nil || boot != "boot-2" || d.Claims["y"].State != checkpoint.PrepareCompleted {
		t.Errorf("checkpoint after recovery: %+v boot %q, %v", d, boot, err)
	}
}

func TestOrphanedCDISpecRemoved(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, _ := e.open(t, "boot")
	if _, err := s.Prepare(context.Background(), claim("kept", []string{"gpu-0"})); err != nil {
		t.Fatal(err)
	}
	w, _ := cdi.NewWriter(filepath.Join(e.dir, "cdi"))
	// A crash after writing the spec of a whole-GPU claim but before checkpointing it.
	if _, err := w.Write("orphan", []cdi.Device{{Name: "gpu-1", UUID: "GPU-x"}}); err != nil {
		t.Fatal(err)
	}
	e.open(t, "boot")
	uids, err := w.ClaimUIDs()
	if err != nil || len(uids) != 1 || uids[0] != "kept" {
		t.Errorf("specs after restart: %v %v, want [kept]", uids, err)
	}
}

// TestRollingUpdateInstances: during a rolling update the kubelet may prepare a claim in one driver
// instance and unprepare it in the other. Both share the checkpoint and (here) the persisted mock
// hardware state, and must agree.
func TestRollingUpdateInstances(t *testing.T) {
	e := &env{dir: t.TempDir()}
	oldInst, _ := e.open(t, "boot")
	newInst, newBackend := e.open(t, "boot")
	ctx := context.Background()
	if _, err := newInst.Prepare(ctx, claim("r1", []string{"gpu-2-mig-1g-10gb-p0"})); err != nil {
		t.Fatal(err)
	}
	// The old instance must not hand out the same placement again...
	if _, err := oldInst.Prepare(ctx, claim("r2", []string{"gpu-2-mig-1g-10gb-p0"})); err == nil {
		t.Fatal("old instance prepared a device the new instance had prepared")
	}
	// ...and can unprepare what the new one prepared.
	if err := oldInst.Unprepare(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if n := migCount(t, newBackend); n != 0 {
		t.Errorf("%d MIG instances left after cross-instance unprepare", n)
	}
	if c := newInst.Claims(); len(c) != 0 {
		t.Logf("new instance still caches %d claims until its next call", len(c))
	}
	if _, err := newInst.Prepare(ctx, claim("r3", []string{"gpu-2-mig-1g-10gb-p0"})); err != nil {
		t.Errorf("placement not free again: %v", err)
	}
}

// TestCDISpecRebuiltFromCheckpoint: CDI specs are not fsynced; the checkpoint is the durable
// record and start-up rebuilds a missing spec from it, byte for byte.
func TestCDISpecRebuiltFromCheckpoint(t *testing.T) {
	timeSlice := `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}}`
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
	}{
		{"whole gpu with config", claim("w", []string{"gpu-0"}, timeSlice)},
		{"dynamic mig", claim("m", []string{"gpu-1-mig-1g-10gb-p0"})},
		{"two devices", claim("two", []string{"gpu-2", "gpu-3"})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{dir: t.TempDir()}
			s, _ := e.open(t, "boot")
			if _, err := s.Prepare(context.Background(), tc.claim); err != nil {
				t.Fatal(err)
			}
			spec := s.cfg.CDI.Path(string(tc.claim.UID))
			want, err := os.ReadFile(spec)
			if err != nil {
				t.Fatal(err)
			}
			// The process is killed after the prepare and the spec is lost.
			if err := os.Remove(spec); err != nil {
				t.Fatal(err)
			}
			s2, b2 := e.open(t, "boot")
			got, err := os.ReadFile(spec)
			if err != nil {
				t.Fatalf("spec not rebuilt at start-up: %v", err)
			}
			if string(got) != string(want) {
				t.Errorf("rebuilt spec differs:\n got %s\nwant %s", got, want)
			}
			if _, ok := s2.Claims()[string(tc.claim.UID)]; !ok {
				t.Errorf("claim lost on restart")
			}
			// Unprepare still removes everything.
			if err := s2.Unprepare(context.Background(), tc.claim.UID); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(spec); !os.IsNotExist(err) {
				t.Errorf("spec left after unprepare: %v", err)
			}
			if n := migCount(t, b2); n != 0 {
				t.Errorf("%d MIG instances left", n)
			}
		})
	}
}

// TestRollingUpdatePeerFinishesCrashedPrepare: the instance that crashes mid-prepare leaves only
// its unsynced intent; the other, running instance sees it on its next call, destroys the planned
// MIG instance and prepares the claim again, without a leak or a placement conflict.
func TestRollingUpdatePeerFinishesCrashedPrepare(t *testing.T) {
	e := &env{dir: t.TempDir()}
	crashing, _ := e.open(t, "boot")
	peer, peerBackend := e.open(t, "boot")
	ctx := context.Background()
	mid := claim("mid", []string{"gpu-4-mig-1g-10gb-p1"})
	reached := make(chan struct{})
	crashing.SetHook(func(ctx context.Context, uid string) {
		close(reached)
		select {} // the process dies here
	})
	go crashing.Prepare(ctx, mid) //nolint:errcheck
	<-reached
	if n := migCount(t, peerBackend); n != 1 {
		t.Fatalf("%d MIG instances while the prepare is paused, want 1", n)
	}
	if _, err := peer.Prepare(ctx, mid); err != nil {
		t.Fatalf("peer prepare of the interrupted claim: %v", err)
	}
	if n := migCount(t, peerBackend); n != 1 {
		t.Errorf("%d MIG instances after the peer's prepare, want 1 (the interrupted one destroyed)", n)
	}
	if c := peer.Claims()["mid"]; c.State != checkpoint.PrepareCompleted {
		t.Errorf("claim state %q, want PrepareCompleted", c.State)
	}
	if err := peer.Unprepare(ctx, "mid"); err != nil {
		t.Fatal(err)
	}
	if n := migCount(t, peerBackend); n != 0 {
		t.Errorf("%d MIG instances leaked", n)
	}
}
