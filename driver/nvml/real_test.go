package nvml

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

// TestRealInventory runs the read-only inventory against the real NVML library. It never changes
// MIG mode or creates anything. It skips where libnvidia-ml is not available.
func TestRealInventory(t *testing.T) {
	b, err := Open("real", Options{})
	if err != nil {
		testreq.GPU(t, "real NVML not available: %v", err)
	}
	defer b.Close()
	gpus, err := Inventory(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) == 0 {
		t.Fatal("NVML initialized but reports no GPU")
	}
	for _, g := range gpus {
		if g.UUID == "" || g.ProductName == "" || g.MemoryBytes == 0 || g.PCIBusID == "" || g.DriverVersion == "" {
			t.Errorf("gpu %d: incomplete model: %+v", g.Index, g)
		}
	}
	for _, g := range gpus {
		n, err := b.MIGInstanceCount(context.Background(), g.UUID)
		if err != nil {
			t.Errorf("gpu %d: MIGInstanceCount: %v", g.Index, err)
		} else if n != countGIs(g.MIGInstances) {
			t.Errorf("gpu %d: MIGInstanceCount = %d, inventory lists %d GPU instances", g.Index, n, countGIs(g.MIGInstances))
		}
	}
	if path := os.Getenv("NEURONETES_INVENTORY_OUT"); path != "" {
		raw, _ := json.MarshalIndent(gpus, "", " ")
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// countGIs counts the distinct GPU instances among MIG instances (one per compute instance).
func countGIs(ins []model.MIGInstance) int {
	gis := map[int]bool{}
	for _, in := range ins {
		gis[in.GIID] = true
	}
	return len(gis)
}
