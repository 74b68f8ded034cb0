package nvml

import (
	"context"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/neuronetes/neuronetes/driver/model"
)

// TestProfileNamesFromNVML: every mock reports the profile names real NVML reports for its GPU
// model, and the fallback name (for NVML without names) computed from the profile's memory gives
// the same name for every one of them.
func TestProfileNamesFromNVML(t *testing.T) {
	want := map[string][]string{
		"dgxa100": {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"},
		"dgxh100": {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"},
		"dgxh200": {"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"},
		"dgxb200": {"1g.23gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb", "1g.23gb+me", "1g.45gb"},
	}
	for prof, names := range want {
		b, err := Open("mock:"+prof, Options{})
		if err != nil {
			t.Fatal(err)
		}
		gpus, err := Inventory(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		g := gpus[0]
		if len(g.MIGProfiles) != len(names) {
			t.Fatalf("%s: %d profiles, want %d", prof, len(g.MIGProfiles), len(names))
		}
		for i, p := range g.MIGProfiles {
			if p.Name != names[i] {
				t.Errorf("%s profile %d: NVML name %q, want %q", prof, p.ID, p.Name, names[i])
			}
			if fb := model.ProfileName(p.ComputeSlices, p.MemoryBytes, g.MemoryBytes, profileSuffix(p.ID)); fb != p.Name {
				t.Errorf("%s profile %d: fallback name %q, NVML says %q", prof, p.ID, fb, p.Name)
			}
		}
	}
}

func TestProfileSuffix(t *testing.T) {
	tests := map[int]string{
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE: "", gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: "+me",
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: "", gonvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: "-me",
		gonvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: "+me.all", gonvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX: "+gfx",
	}
	for id, want := range tests {
		if got := profileSuffix(id); got != want {
			t.Errorf("profile %d: suffix %q, want %q", id, got, want)
		}
	}
}
