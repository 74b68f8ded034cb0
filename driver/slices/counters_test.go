package slices

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/neuronetes/neuronetes/driver/model"
)

// gpuDevices returns the published devices of GPU index (whole GPU first) and its counter set.
func gpuDevices(t *testing.T, res []resourceapi.Device, sets []resourceapi.CounterSet, index int) ([]resourceapi.Device, map[string]int64) {
	t.Helper()
	var devs []resourceapi.Device
	for _, d := range res {
		if len(d.ConsumesCounters) == 1 && d.ConsumesCounters[0].CounterSet == model.CounterSetName(index) {
			if d.Name == model.WholeGPUName(index) {
				devs = append([]resourceapi.Device{d}, devs...)
			} else {
				devs = append(devs, d)
			}
		}
	}
	for _, cs := range sets {
		if cs.Name == model.CounterSetName(index) {
			c := map[string]int64{}
			for k, v := range cs.Counters {
				c[k] = v.Value.Value()
			}
			return devs, c
		}
	}
	t.Fatalf("no counter set for GPU %d", index)
	return nil, nil
}

// TestEssentialCountersExact checks that the published (pruned) counters allow exactly the sets of
// devices that the GPU's full counter set allows (model.Counters, every device consuming its full
// model.Consumption and the whole GPU consuming everything): it enumerates every set the published
// counters allow and checks it against the full counters. Both are monotone, so the enumeration
// stops at the first refused device, and a set the full counters allow is always allowed by the
// published ones (they are a subset with the same capacities).
func TestEssentialCountersExact(t *testing.T) {
	tests := []struct {
		profile  string
		profiles []string
		// kept is the number of published counters per GPU (of len(Counters()) in the model).
		kept int
	}{
		{"dgxh100", nil, 0},
		{"dgxh100", []string{"1g.10gb", "3g.40gb"}, 8}, // memory and 7 slots
		{"dgxh100", []string{"1g.10gb"}, 7},            // only the slots
		{"dgxh100", []string{"3g.40gb"}, 2},            // one slot per 3g placement
		{"dgxh100", []string{"7g.80gb"}, 1},
		{"dgxa100", nil, 0},
		{"dgxb200", nil, 0},
		{"dgxh200", []string{"1g.18gb+me", "2g.35gb", "4g.71gb"}, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s-%v", tc.profile, tc.profiles), func(t *testing.T) {
			gpus := inventory(t, tc.profile)
			res := Build("n", gpus, Options{Profiles: tc.profiles})
			if err := Validate(res); err != nil {
				t.Fatal(err)
			}
			var all []resourceapi.Device
			var sets []resourceapi.CounterSet
			for _, s := range res.Pools["n"].Slices {
				all = append(all, s.Devices...)
				sets = append(sets, s.SharedCounters...)
			}
			g := gpus[0]
			devs, published := gpuDevices(t, all, sets, g.Index)
			if tc.kept > 0 && len(published) != tc.kept {
				t.Errorf("%d counters published, want %d: %v", len(published), tc.kept, published)
			}
			full := g.Counters()
			fullUse := make([]map[string]int64, len(devs))
			pubUse := make([]map[string]int64, len(devs))
			for i, d := range devs {
				pubUse[i] = map[string]int64{}
				for k, v := range d.ConsumesCounters[0].Counters {
					pubUse[i][k] = v.Value.Value()
				}
				ref, err := Resolve(gpus, Options{Profiles: tc.profiles}, d.Name)
				if err != nil {
					t.Fatal(err)
				}
				if ref.Kind == KindGPU {
					fullUse[i] = full
				} else {
					fullUse[i] = ref.Profile.Consumption(ref.Placement)
				}
			}
			fits := func(capacity map[string]int64, use []map[string]int64, set []int) bool {
				sum := map[string]int64{}
				for _, i := range set {
					for k, v := range use[i] {
						if _, ok := capacity[k]; !ok {
							continue
						}
						sum[k] += v
						if sum[k] > capacity[k] {
							return false
						}
					}
				}
				return true
			}
			allowed := 0
			var walk func(from int, set []int)
			walk = func(from int, set []int) {
				for i := from; i < len(devs); i++ {
					next := append(append([]int(nil), set...), i)
					if !fits(published, pubUse, next) {
						continue
					}
					allowed++
					if !fits(full, fullUse, next) {
						names := []string{}
						for _, j := range next {
							names = append(names, devs[j].Name)
						}
						t.Fatalf("published counters allow %v, the full counters do not", names)
					}
					walk(i+1, next)
				}
			}
			walk(0, nil)
			t.Logf("%d devices, %d of %d counters published, %d allowed device sets", len(devs), len(published), len(full), allowed)
			if allowed < len(devs) {
				t.Errorf("only %d sets allowed for %d devices", allowed, len(devs))
			}
		})
	}
}
