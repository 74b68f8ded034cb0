package slices

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

// TestRealSlices builds and validates the slices of the real GPUs in every MIG mode (read-only:
// nothing on the GPUs changes). It skips where libnvidia-ml is not available.
func TestRealSlices(t *testing.T) {
	b, err := nvml.Open("real", nvml.Options{})
	if err != nil {
		testreq.GPU(t, "real NVML not available: %v", err)
	}
	defer b.Close()
	gpus, err := nvml.Inventory(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []MIGMode{MIGDynamic, MIGStatic, MIGNone} {
		res := Build("real-node", gpus, Options{MIG: mode})
		if err := Validate(res); err != nil {
			t.Errorf("mode %s: %v", mode, err)
		}
		devices := 0
		for _, s := range res.Pools["real-node"].Slices {
			devices += len(s.Devices)
		}
		t.Logf("mode %s: %d slices, %d devices", mode, len(res.Pools["real-node"].Slices), devices)
		if devices < len(gpus) && mode != MIGStatic {
			t.Errorf("mode %s: %d devices for %d GPUs", mode, devices, len(gpus))
		}
		if path := os.Getenv("NEURONETES_SLICES_OUT"); path != "" && mode == MIGDynamic {
			raw, _ := json.MarshalIndent(res, "", " ")
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
