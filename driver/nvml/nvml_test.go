package nvml

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/neuronetes/neuronetes/driver/model"
)

func TestInventoryProfiles(t *testing.T) {
	tests := []struct {
		profile      string
		gpus         int
		migCapable   int
		domains      int // distinct non-empty NVLink domains
		firstProfile string
	}{
		{"dgxa100", 8, 8, 1, "1g.5gb"},
		{"dgxh100", 8, 8, 1, "1g.10gb"},
		{"dgxh200", 8, 8, 1, "1g.18gb"},
		{"dgxb200", 8, 8, 1, ""},
		{"nvlink-pairs", 8, 8, 4, "1g.10gb"},
		{"mixed", 4, 2, 0, "1g.10gb"},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			b, err := Open("mock:"+tc.profile, Options{})
			if err != nil {
				t.Fatal(err)
			}
			gpus, err := Inventory(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != tc.gpus {
				t.Fatalf("got %d GPUs, want %d", len(gpus), tc.gpus)
			}
			capable := 0
			domains := map[string]int{}
			for _, g := range gpus {
				if g.MIGCapable {
					capable++
				}
				if g.NVLinkDomain != "" {
					domains[g.NVLinkDomain]++
				}
				if g.PCIBusID == "" || g.PCIeRoot == "" || g.NUMANode < 0 || g.UUID == "" {
					t.Errorf("gpu %d: incomplete model %+v", g.Index, g)
				}
			}
			if capable != tc.migCapable {
				t.Errorf("MIG-capable GPUs = %d, want %d", capable, tc.migCapable)
			}
			if len(domains) != tc.domains {
				t.Errorf("NVLink domains = %v, want %d", domains, tc.domains)
			}
			if tc.firstProfile != "" && gpus[0].MIGProfiles[0].Name != tc.firstProfile {
				t.Errorf("first profile = %s, want %s", gpus[0].MIGProfiles[0].Name, tc.firstProfile)
			}
			// UUIDs are deterministic across opens.
			b2, _ := Open("mock:"+tc.profile, Options{})
			gpus2, _ := Inventory(context.Background(), b2)
			if gpus2[0].UUID != gpus[0].UUID {
				t.Errorf("UUID not stable: %s vs %s", gpus[0].UUID, gpus2[0].UUID)
			}
		})
	}
}

func TestNVLinkPairs(t *testing.T) {
	b, err := Open("mock:nvlink-pairs", Options{})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := Inventory(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(gpus); i += 2 {
		if gpus[i].NVLinkDomain == "" || gpus[i].NVLinkDomain != gpus[i+1].NVLinkDomain {
			t.Errorf("gpus %d,%d: domains %q %q, want equal", i, i+1, gpus[i].NVLinkDomain, gpus[i+1].NVLinkDomain)
		}
		if i+2 < len(gpus) && gpus[i].NVLinkDomain == gpus[i+2].NVLinkDomain {
			t.Errorf("gpus %d,%d share a domain but are not linked", i, i+2)
		}
	}
}

func TestMIGLifecycleAndPersistence(t *testing.T) {
	ctx := context.Background()
	state := filepath.Join(t.TempDir(), "mock.json")
	b, err := Open("mock:dgxh100", Options{StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := Inventory(ctx, b)
	g := gpus[0]
	p, _ := g.ProfileByName("1g.10gb")
	p3, _ := g.ProfileByName("3g.40gb")
	in, err := b.CreateMIG(ctx, g.UUID, p.ID, p.Placements[0])
	if err != nil {
		t.Fatal(err)
	}
	if in.UUID == "" {
		t.Errorf("MIG instance without UUID")
	}
	// Constraints the mock would not enforce.
	if _, err := b.CreateMIG(ctx, g.UUID, p.ID, p.Placements[0]); err == nil {
		t.Errorf("overlapping placement accepted")
	}
	if _, err := b.CreateMIG(ctx, g.UUID, p3.ID, model.Placement{Start: 1, Size: 3}); err == nil {
		t.Errorf("invalid placement accepted")
	}
	if _, err := b.CreateMIG(ctx, gpus[1].UUID, p3.ID, p3.Placements[0]); err != nil {
		t.Fatal(err)
	}
	// A new backend on the same state file sees the instances (they outlive the process).
	b2, err := Open("mock:dgxh100", Options{StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := b2.GPU(ctx, g.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if !g2.MIGEnabled || len(g2.MIGInstances) != 1 || g2.MIGInstances[0] != in {
		t.Fatalf("restored instances = %+v, want [%+v]", g2.MIGInstances, in)
	}
	for _, tc := range []struct {
		uuid string
		want int
	}{{g.UUID, 1}, {gpus[1].UUID, 1}, {gpus[2].UUID, 0}} {
		if n, err := b2.MIGInstanceCount(ctx, tc.uuid); err != nil || n != tc.want {
			t.Errorf("MIGInstanceCount(%s) = %d, %v; want %d", tc.uuid, n, err, tc.want)
		}
	}
	if err := b2.DestroyMIG(ctx, g.UUID, in.GIID); err != nil {
		t.Fatal(err)
	}
	if err := b2.DestroyMIG(ctx, g.UUID, in.GIID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second destroy: %v, want ErrNotFound", err)
	}
	g3, _ := b2.GPU(ctx, g.UUID)
	if g3.MIGEnabled || len(g3.MIGInstances) != 0 {
		t.Errorf("after destroy: enabled=%v instances=%v", g3.MIGEnabled, g3.MIGInstances)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, spec := range []string{"mock:nope", "bogus"} {
		if _, err := Open(spec, Options{}); err == nil {
			t.Errorf("Open(%q) succeeded", spec)
		}
	}
}

func TestInject(t *testing.T) {
	b, _ := Open("mock:dgxh100", Options{})
	ch := b.Events(context.Background())
	if !b.Inject(Event{UUID: "GPU-x", Kind: EventXID, XID: 79}) {
		t.Fatal("inject dropped")
	}
	if ev := <-ch; ev.XID != 79 || ev.Time.IsZero() {
		t.Errorf("event = %+v", ev)
	}
}
