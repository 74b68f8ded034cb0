package slices

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
)

var update = flag.Bool("update", false, "rewrite golden files")

func inventory(t testing.TB, profile string) []model.GPUInfo {
	t.Helper()
	b, err := nvml.Open("mock:"+profile, nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := nvml.Inventory(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

func TestBuildGolden(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		opts    Options
	}{
		{"dgxa100", "dgxa100", Options{}},
		{"dgxh100", "dgxh100", Options{}},
		{"dgxh200", "dgxh200", Options{}},
		{"dgxb200", "dgxb200", Options{}},
		{"nvlink-pairs", "nvlink-pairs", Options{}},
		{"mixed", "mixed", Options{}},
		{"dgxh100-whole", "dgxh100", Options{MIG: MIGNone}},
		{"dgxh100-selected", "dgxh100", Options{Profiles: []string{"1g.10gb", "3g.40gb"}}},
		{"dgxa100-compat", "dgxa100", Options{Compat: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Build("node-a", inventory(t, tc.profile), tc.opts)
			if err := Validate(res); err != nil {
				t.Fatalf("invalid: %v", err)
			}
			got, err := json.MarshalIndent(res, "", " ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.name+".json")
			if *update {
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("golden file (run with -update): %v", err)
			}
			if string(want) != string(got)+"\n" {
				t.Errorf("%s differs from Build output; rerun with -update and review the diff", path)
			}
		})
	}
}

// TestBuildFromRecordedInventory builds slices from a device model recorded by Inventory on a real
// NVIDIA H200 (driver 580.159.04, MIG mode off) with TestRealInventory.
func TestBuildFromRecordedInventory(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "real-h200-inventory.json"))
	if err != nil {
		t.Fatal(err)
	}
	var gpus []model.GPUInfo
	if err := json.Unmarshal(raw, &gpus); err != nil {
		t.Fatal(err)
	}
	res := Build("node-a", gpus, Options{})
	if err := Validate(res); err != nil {
		t.Fatal(err)
	}
	got, _ := json.MarshalIndent(res, "", " ")
	path := filepath.Join("testdata", "real-h200.json")
	if *update {
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file (run with -update): %v", err)
	}
	if string(want) != string(got)+"\n" {
		t.Errorf("%s differs from Build output; rerun with -update and review the diff", path)
	}
	// Real NVML placements are in 8 memory slots (7g at 0 size 8; 3g at 0 and 4, size 4).
	if n := gpus[0].MemorySlots(); n != 8 {
		t.Errorf("memory slots = %d, want 8", n)
	}
}

func TestBuildLayout(t *testing.T) {
	tests := []struct {
		profile      string
		opts         Options
		counterSlice int
		devices      int
	}{
		// H100: whole + 7 (1g.10gb) + 7 (1g.10gb+me) + 7 (1g.20gb) + 3 + 2 + 1 + 1 = 29 per GPU.
		{"dgxh100", Options{}, 1, 8 * 29},
		{"dgxh100", Options{MIG: MIGNone}, 0, 8},
		{"dgxh100", Options{Profiles: []string{"1g.10gb"}}, 1, 8 * 8},
		{"dgxh100", Options{Profiles: []string{"1g.10gb", "3g.40gb"}, MIGGPUs: 4}, 1, 8 + 4*9},
		{"mixed", Options{}, 1, 2*29 + 2},
	}
	for _, tc := range tests {
		res := Build("n", inventory(t, tc.profile), tc.opts)
		pool := res.Pools["n"]
		counters, devices := 0, 0
		for _, s := range pool.Slices {
			if len(s.SharedCounters) > 0 {
				counters++
			}
			devices += len(s.Devices)
		}
		if counters != tc.counterSlice || devices != tc.devices {
			t.Errorf("%s %+v: counter slices %d devices %d, want %d %d", tc.profile, tc.opts, counters, devices, tc.counterSlice, tc.devices)
		}
	}
}

func TestBuildSplitsAndTaints(t *testing.T) {
	gpus := inventory(t, "dgxh100")
	taint := resourceapi.DeviceTaint{Key: "gpu.neuronetes.io/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	res := Build("n", gpus, Options{MaxDevicesPerSlice: 10, Taints: map[string][]resourceapi.DeviceTaint{gpus[2].UUID: {taint}}})
	if err := Validate(res); err != nil {
		t.Fatal(err)
	}
	tainted := 0
	for _, s := range res.Pools["n"].Slices {
		if len(s.Devices) > 10 {
			t.Errorf("slice with %d devices, cap 10", len(s.Devices))
		}
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				tainted++
				if *d.Attributes[AttrIndex].IntValue != 2 {
					t.Errorf("device %s of another GPU tainted", d.Name)
				}
			}
		}
	}
	if tainted != 29 {
		t.Errorf("tainted devices = %d, want 29", tainted)
	}
}

func TestValidateRejects(t *testing.T) {
	gpus := inventory(t, "dgxh100")
	res := Build("n", gpus, Options{})
	pool := res.Pools["n"]
	pool.Slices[1].Devices[1].ConsumesCounters[0].CounterSet = "missing"
	if err := Validate(res); err == nil {
		t.Error("missing counter set accepted")
	}
	res = Build("n", gpus, Options{})
	pool = res.Pools["n"]
	pool.Slices[1].Devices[2].Name = "gpu-0"
	if err := Validate(res); err == nil {
		t.Error("duplicate device accepted")
	}
}

func TestResolve(t *testing.T) {
	gpus := inventory(t, "dgxh100")
	tests := []struct {
		name    string
		opts    Options
		kind    Kind
		wantErr bool
	}{
		{"gpu-3", Options{}, KindGPU, false},
		{"gpu-3-mig-1g-10gb-p4", Options{}, KindDynamicMIG, false},
		{"gpu-3-mig-1g-10gb-me-p0", Options{}, KindDynamicMIG, false},
		{"gpu-3-mig-3g-40gb-p4", Options{}, KindDynamicMIG, false},
		{"gpu-3-mig-3g-40gb-p1", Options{}, 0, true},
		{"gpu-3-mig-1g-10gb-p4", Options{MIG: MIGNone}, 0, true},
		{"gpu-3-mig-2g-20gb-p0", Options{Profiles: []string{"1g.10gb"}}, 0, true},
		{"gpu-9", Options{}, 0, true},
		{"gpu-7-mig-3g-40gb-p4", Options{MIGGPUs: 4}, KindDynamicMIG, false},
		{"gpu-3-mig-3g-40gb-p4", Options{MIGGPUs: 4}, 0, true},
		{"gpu-3", Options{MIGGPUs: 4}, KindGPU, false},
		{"gpu-1-mig-0-0", Options{}, 0, true},
		{"tpu-0", Options{}, 0, true},
	}
	for _, tc := range tests {
		ref, err := Resolve(gpus, tc.opts, tc.name)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v, wantErr %v", tc.name, err, tc.wantErr)
			continue
		}
		if err == nil && ref.Kind != tc.kind {
			t.Errorf("%s: kind %v, want %v", tc.name, ref.Kind, tc.kind)
		}
	}
	// Every published name resolves.
	for _, s := range Build("n", gpus, Options{}).Pools["n"].Slices {
		for _, d := range s.Devices {
			if _, err := Resolve(gpus, Options{}, d.Name); err != nil {
				t.Errorf("published device does not resolve: %v", err)
			}
		}
	}
}

func TestStaticMIG(t *testing.T) {
	ctx := context.Background()
	b, err := nvml.Open("mock:dgxh100", nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := nvml.Inventory(ctx, b)
	p1, _ := gpus[0].ProfileByName("1g.10gb")
	p3, _ := gpus[0].ProfileByName("3g.40gb")
	for _, c := range []struct {
		p  model.MIGProfile
		at int
	}{{p1, 0}, {p1, 1}, {p3, 1}} {
		if _, err := b.CreateMIG(ctx, gpus[0].UUID, c.p.ID, c.p.Placements[c.at]); err != nil {
			t.Fatal(err)
		}
	}
	gpus, _ = nvml.Inventory(ctx, b)
	res := Build("n", gpus, Options{MIG: MIGStatic})
	if err := Validate(res); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.Pools["n"].Slices {
		if len(s.SharedCounters) > 0 {
			t.Errorf("static mode published counters")
		}
		for _, d := range s.Devices {
			names = append(names, d.Name)
			if strings.Contains(d.Name, "-mig-") && (attrString(d, AttrUUID) == "" || !strings.HasPrefix(attrString(d, AttrUUID), "MIG-")) {
				t.Errorf("static MIG device %s without MIG UUID", d.Name)
			}
		}
	}
	want := "gpu-1 gpu-2 gpu-3 gpu-4 gpu-5 gpu-6 gpu-7 gpu-0-mig-0-0 gpu-0-mig-1-0 gpu-0-mig-2-0" // whole GPUs first (scanOrder)
	if got := strings.Join(names, " "); got != want {
		t.Errorf("static devices = %s, want %s", got, want)
	}
	ref, err := Resolve(gpus, Options{MIG: MIGStatic}, "gpu-0-mig-2-0")
	if err != nil || ref.Kind != KindStaticMIG || ref.Profile.Name != "3g.40gb" {
		t.Errorf("resolve static: %+v %v", ref, err)
	}
	if _, err := Resolve(gpus, Options{MIG: MIGStatic}, "gpu-0"); err == nil {
		t.Errorf("whole GPU of a partitioned GPU resolved")
	}
}

func attrString(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func TestUnknownProfiles(t *testing.T) {
	h100 := inventory(t, "dgxh100")
	a100 := inventory(t, "dgxa100")
	tests := []struct {
		name     string
		mode     MIGMode
		gpus     []model.GPUInfo
		profiles []string
		want     []string
	}{
		{"all profiles", "", h100, nil, nil},
		{"known H100 profiles", "", h100, []string{"1g.10gb", "3g.40gb"}, nil},
		{"typo", "", h100, []string{"1g.10gb", "1g.11gb"}, []string{"1g.11gb"}},
		{"A100 profile on an H100 node", "", h100, []string{"1g.5gb"}, []string{"1g.5gb"}},
		{"A100 profile on an A100 node", "", a100, []string{"1g.5gb"}, nil},
		{"no GPUs", "", nil, []string{"1g.10gb"}, []string{"1g.10gb"}},
		{"static mode ignores profiles", MIGStatic, h100, []string{"1g.11gb"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Options{MIG: tt.mode, Profiles: tt.profiles}.UnknownProfiles(tt.gpus)
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("UnknownProfiles(%v) = %v, want %v", tt.profiles, got, tt.want)
			}
		})
	}
}
