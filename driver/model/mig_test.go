package model

import (
	"strings"
	"testing"
)

// h100 is a hand-written H100-like GPU (placements as in go-nvml's mock).
func h100() GPUInfo {
	return GPUInfo{
		UUID: "GPU-test", MIGCapable: true, MemoryBytes: 80 << 30, Multiprocessors: 112,
		MIGProfiles: []MIGProfile{
			{ID: 0, Name: "1g.10gb", ComputeSlices: 1, MemoryBytes: 10 << 30, Multiprocessors: 16, MaxInstances: 7, CopyEngines: 1, Decoders: 1,
				Placements: []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
			{ID: 7, Name: "1g.10gb+me", ComputeSlices: 1, MemoryBytes: 10 << 30, Multiprocessors: 16, MaxInstances: 1, CopyEngines: 1, Decoders: 1, JPEGs: 1, OFAs: 1,
				Placements: []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
			{ID: 9, Name: "1g.20gb", ComputeSlices: 1, MemoryBytes: 20 << 30, Multiprocessors: 16, MaxInstances: 4, CopyEngines: 1, Decoders: 1,
				Placements: []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
			{ID: 2, Name: "3g.40gb", ComputeSlices: 3, MemoryBytes: 40 << 30, Multiprocessors: 48, MaxInstances: 2, CopyEngines: 3, Decoders: 2,
				Placements: []Placement{{0, 3}, {4, 3}}},
			{ID: 4, Name: "7g.80gb", ComputeSlices: 7, MemoryBytes: 80 << 30, Multiprocessors: 112, MaxInstances: 1, CopyEngines: 7, Decoders: 5,
				Placements: []Placement{{0, 7}}},
		},
	}
}

func TestCounters(t *testing.T) {
	g := h100()
	c := g.Counters()
	want := map[string]int64{
		CounterMemory: 80 << 30, CounterMultiprocessors: 112, CounterComputeSlices: 7, CounterCopyEngines: 7,
		CounterDecoders: 7, CounterJPEGs: 1, CounterOFAs: 1, "memory-slot-0": 1, "memory-slot-6": 1,
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("counter %s = %d, want %d", k, c[k], v)
		}
	}
	if _, ok := c[CounterEncoders]; ok {
		t.Errorf("zero-capacity encoder counter published")
	}
	if len(c) != 7+7 {
		t.Errorf("%d counters, want 14: %v", len(c), c)
	}
	p3, _ := g.ProfileByName("3g.40gb")
	cons := p3.Consumption(Placement{4, 3})
	if cons["memory-slot-4"] != 1 || cons["memory-slot-6"] != 1 || cons["memory-slot-3"] != 0 || cons[CounterComputeSlices] != 3 {
		t.Errorf("3g.40gb@4 consumption = %v", cons)
	}
}

func TestCheckPlacement(t *testing.T) {
	g := h100()
	sevenSmall := make([]MIGInstance, 0, 7)
	for i := 0; i < 7; i++ {
		sevenSmall = append(sevenSmall, MIGInstance{ProfileID: 0, GIID: i, Placement: Placement{i, 1}})
	}
	fourBig := []MIGInstance{{ProfileID: 9, GIID: 0, Placement: Placement{0, 1}}, {ProfileID: 9, GIID: 1, Placement: Placement{1, 1}},
		{ProfileID: 9, GIID: 2, Placement: Placement{2, 1}}, {ProfileID: 9, GIID: 3, Placement: Placement{3, 1}}}
	tests := []struct {
		name     string
		existing []MIGInstance
		profile  int
		pl       Placement
		errHas   string
	}{
		{"empty gpu 1g", nil, 0, Placement{0, 1}, ""},
		{"empty gpu 7g", nil, 4, Placement{0, 7}, ""},
		{"bad placement", nil, 2, Placement{1, 3}, "not valid"},
		{"unknown profile", nil, 5, Placement{0, 1}, "unknown MIG profile"},
		{"overlap", []MIGInstance{{ProfileID: 2, Placement: Placement{0, 3}}}, 0, Placement{2, 1}, "overlaps"},
		{"next to 3g", []MIGInstance{{ProfileID: 2, Placement: Placement{0, 3}}}, 0, Placement{3, 1}, ""},
		{"7g on partitioned gpu", []MIGInstance{{ProfileID: 0, Placement: Placement{6, 1}}}, 4, Placement{0, 7}, "overlaps"},
		{"max instances of +me", []MIGInstance{{ProfileID: 7, Placement: Placement{0, 1}}}, 7, Placement{1, 1}, "maximum"},
		{"full gpu", sevenSmall[:6], 0, Placement{6, 1}, ""},
		{"memory exhausted", fourBig, 9, Placement{4, 1}, "maximum"},
		{"memory counter", fourBig, 0, Placement{4, 1}, `"memory"`},
		{"three 1g.20gb leave room", fourBig[:3], 0, Placement{4, 1}, ""},
	}
	for _, tc := range tests {
		err := g.CheckPlacement(tc.existing, tc.profile, tc.pl)
		switch {
		case tc.errHas == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.errHas)
		}
	}
	notCapable := GPUInfo{UUID: "GPU-x"}
	if err := notCapable.CheckPlacement(nil, 0, Placement{0, 1}); err == nil {
		t.Errorf("MIG on a non-MIG GPU accepted")
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{WholeGPUName(3), "gpu-3"},
		{DynamicMIGName(0, "1g.10gb", 1), "gpu-0-mig-1g-10gb-p1"},
		{DynamicMIGName(0, "1g.10gb+me", 0), "gpu-0-mig-1g-10gb-me-p0"},
		{StaticMIGName(2, 5, 0), "gpu-2-mig-5-0"},
		{ProfileName(1, 10<<30, 0, ""), "1g.10gb"},
		{ProfileName(2, 10<<30, 0, "+me"), "2g.10gb+me"},
		{NVMLProfileName("MIG 1g.18gb"), "1g.18gb"},
		{NVMLProfileName(""), ""},
	}
	for _, tc := range tests {
		if tc.got != tc.want || strings.Contains(tc.got, ".") && strings.HasPrefix(tc.got, "gpu") {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestProfileNameFallback: the fallback names NVIDIA's profiles from the instance's share of the
// GPU's memory, for real GPUs (memory as NVML reports it on them) and the mocks alike.
func TestProfileNameFallback(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name          string
		slices        int
		mem, gpuMem   uint64
		suffix, wantN string
	}{
		{"real H200 1g", 1, 17179869184, 150754820096, "", "1g.18gb"},
		{"real H200 1g+me", 1, 17179869184, 150754820096, "+me", "1g.18gb+me"},
		{"real H200 2g", 2, 34896609280, 150754820096, "", "2g.35gb"},
		{"real H200 3g", 3, 74893492224, 150754820096, "", "3g.71gb"},
		{"real H200 7g", 7, 150323855360, 150754820096, "", "7g.141gb"},
		{"A100-40GB 1g", 1, 4864 * mib, 40960 * mib, "", "1g.5gb"},
		{"A100-40GB 7g", 7, 39936 * mib, 40536 * mib, "", "7g.40gb"},
		{"B200 1g", 1, 23552 * mib, 184320 * mib, "", "1g.23gb"},
		{"H100 NVL 3g", 3, 47616 * mib, 95830 * mib, "", "3g.47gb"},
		{"unknown GPU memory", 1, 10 << 30, 0, "", "1g.10gb"},
	}
	for _, tc := range tests {
		if got := ProfileName(tc.slices, tc.mem, tc.gpuMem, tc.suffix); got != tc.wantN {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.wantN)
		}
	}
}
