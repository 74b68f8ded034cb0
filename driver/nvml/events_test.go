package nvml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestEventLoopBacksOffOnLostGPU: while waits report a lost GPU the loop announces it once and
// sleeps with exponential backoff instead of spinning; a normal wait resets the backoff.
func TestEventLoopBacksOffOnLostGPU(t *testing.T) {
	b, err := Open("mock:dgxh100", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := []waitResult{
		{ret: gonvml.ERROR_GPU_IS_LOST}, {ret: gonvml.ERROR_GPU_IS_LOST}, {ret: gonvml.ERROR_GPU_IS_LOST},
		{ret: gonvml.ERROR_GPU_IS_LOST}, {ret: gonvml.ERROR_GPU_IS_LOST}, {ret: gonvml.ERROR_GPU_IS_LOST},
		{ret: gonvml.ERROR_TIMEOUT}, {ret: gonvml.ERROR_GPU_IS_LOST},
		{ret: gonvml.SUCCESS, uuid: "GPU-x", xid: 79},
	}
	i := 0
	var slept []time.Duration
	wait := func() waitResult {
		if i == len(results) {
			cancel()
			return waitResult{ret: gonvml.ERROR_TIMEOUT}
		}
		i++
		return results[i-1]
	}
	b.eventLoop(ctx, wait, func() []string { return []string{"GPU-lost"} }, func(d time.Duration) bool { slept = append(slept, d); return true })
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, time.Second}
	if len(slept) != len(want) {
		t.Fatalf("slept %v, want %v", slept, want)
	}
	for k := range want {
		if slept[k] != want[k] {
			t.Errorf("sleep %d: %v, want %v", k, slept[k], want[k])
		}
	}
	var evs []Event
	for len(b.events) > 0 {
		evs = append(evs, <-b.events)
	}
	if len(evs) != 2 || evs[0].Kind != EventLost || evs[0].UUID != "GPU-lost" || evs[1].Kind != EventXID || evs[1].XID != 79 {
		t.Errorf("events %+v, want one lost GPU-lost then XID 79", evs)
	}
}

func TestProbeMockLost(t *testing.T) {
	b, err := Open("mock:dgxh100", Options{})
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := Inventory(context.Background(), b)
	u := gpus[2].UUID
	if err := b.Probe(context.Background(), u); err != nil {
		t.Fatalf("healthy GPU: %v", err)
	}
	if err := b.SetLost(u, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(context.Background(), u); !errors.Is(err, ErrGPULost) {
		t.Errorf("lost GPU probe: %v", err)
	}
	_ = b.SetLost(u, false)
	if err := b.Probe(context.Background(), u); err != nil {
		t.Errorf("answering again: %v", err)
	}
}

// TestMockRefusesImpossiblePlacement: like hardware, the completed mock refuses a placement the
// profile does not offer and one that overlaps an instance.
func TestMockRefusesImpossiblePlacement(t *testing.T) {
	b, err := Open("mock:dgxh100", Options{})
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := Inventory(context.Background(), b)
	d, _ := b.Lib.DeviceGetHandleByUUID(gpus[0].UUID)
	info, _ := d.GetGpuInstanceProfileInfo(gonvml.GPU_INSTANCE_PROFILE_3_SLICE)
	pls, _ := d.GetGpuInstancePossiblePlacements(&info)
	size := pls[0].Size
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: 1, Size: size}); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("invalid placement: %s", gonvml.ErrorString(ret))
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: 0, Size: size}); ret != gonvml.SUCCESS {
		t.Fatalf("valid placement: %s", gonvml.ErrorString(ret))
	}
	one, _ := d.GetGpuInstanceProfileInfo(gonvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.CreateGpuInstanceWithPlacement(&one, &gonvml.GpuInstancePlacement{Start: 2, Size: 1}); ret != gonvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("overlapping placement: %s", gonvml.ErrorString(ret))
	}
}

// TestInconsistentMockStateStartsClean: a state file the GPUs cannot hold (overlapping instances)
// used to crash the driver with a nil dereference; it is now moved aside and the mock starts clean.
func TestInconsistentMockStateStartsClean(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "mock.json")
	b, err := Open("mock:dgxh100", Options{StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := Inventory(context.Background(), b)
	p3, _ := gpus[0].ProfileByName("3g.40gb")
	if _, err := b.CreateMIG(context.Background(), gpus[0].UUID, p3.ID, p3.Placements[0]); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	// A second, overlapping 3g instance on GPU 0 (giID 7).
	bad := strings.Replace(string(raw), `"instances":[{`, fmt.Sprintf(`"instances":[{"profileID":2,"giID":7,"start":0,"size":%d,"ciProfiles":[2]},{`, p3.Placements[0].Size), 1)
	if bad == string(raw) {
		t.Fatalf("state file layout changed: %s", raw)
	}
	if err := os.WriteFile(state, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	b2, err := Open("mock:dgxh100", Options{StateFile: state})
	if err != nil {
		t.Fatalf("open with an inconsistent state file: %v", err)
	}
	gpus2, err := Inventory(context.Background(), b2)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(gpus2[0].MIGInstances); n != 0 {
		t.Errorf("%d instances after starting clean", n)
	}
	if _, err := os.Stat(state + ".corrupt"); err != nil {
		t.Errorf("inconsistent file not kept aside: %v", err)
	}
}
