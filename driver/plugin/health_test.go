package plugin

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
)

func taintedDevices(t *testing.T, d *Driver, key string) int {
	n := 0
	for _, p := range d.Resources().Pools {
		for _, s := range p.Slices {
			for _, dv := range s.Devices {
				for _, tn := range dv.Taints {
					if tn.Key == key && tn.Effect == resourceapi.DeviceTaintEffectNoSchedule {
						n++
					}
				}
			}
		}
	}
	return n
}

// TestLostGPUTaintSurvivesRestartAndClearsOnRecovery: a lost GPU is tainted, the taint is in the
// checkpoint so a restarted driver publishes it before any event, and once the GPU answers probes
// again the taint is cleared.
func TestLostGPUTaintSurvivesRestartAndClearsOnRecovery(t *testing.T) {
	dir := t.TempDir()
	layout := func(o *Options) {
		o.Slices = slices.Options{MIG: slices.MIGNone}
		o.ProbeMin, o.ProbeMax = 50*time.Millisecond, 100*time.Millisecond
	}
	d, _ := startDriverOpts(t, dir, newKube(), layout)
	srv := httptest.NewServer(d.DebugHandler())
	defer srv.Close()
	if resp, err := http.Post(srv.URL+"/debug/health?gpu=gpu-4&kind=lost", "", nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("lost: %v %v", resp, err)
	}
	eventually(t, "gpu-4 tainted lost", func() bool { return taintedDevices(t, d, lostKey(model.DriverName)) == 1 })
	// The mock GPU keeps failing probes: still tainted well after several probes.
	time.Sleep(300 * time.Millisecond)
	if n := taintedDevices(t, d, lostKey(model.DriverName)); n != 1 {
		t.Fatalf("taint gone while the GPU is still lost: %d", n)
	}
	d.Stop()

	d2, _ := startDriverOpts(t, dir, newKube(), layout)
	if n := taintedDevices(t, d2, lostKey(model.DriverName)); n != 1 {
		t.Fatalf("restarted driver publishes %d lost taints, want 1 (from the checkpoint)", n)
	}
	time.Sleep(1500 * time.Millisecond) // the restored lost GPU is probed, and still fails
	if n := taintedDevices(t, d2, lostKey(model.DriverName)); n != 1 {
		t.Fatalf("restored taint gone while the GPU is still lost: %d", n)
	}
	// The GPU answers again; nothing reports it (as with real NVML): the probe finds out.
	if err := d2.opts.Backend.SetLost(d2.State.GPUs()[4].UUID, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "probe clears the taint", func() bool { return taintedDevices(t, d2, lostKey(model.DriverName)) == 0 })
	if h := d2.State.Health(); len(h) != 0 {
		t.Errorf("checkpointed health after recovery: %v", h)
	}
}

func lostKey(domain string) string { return domain + "/gpu-lost" }

// TestRefreshPublishesAdminMIGChanges: in static mode, a MIG instance an admin creates while the
// driver runs is published by the next refresh, without a restart.
func TestRefreshPublishesAdminMIGChanges(t *testing.T) {
	dir := t.TempDir()
	d, kube := startDriverOpts(t, dir, newKube(), func(o *Options) {
		o.Slices = slices.Options{MIG: slices.MIGStatic}
		o.RefreshInterval = 100 * time.Millisecond
	})
	eventually(t, "8 whole GPUs", func() bool { devs, _ := publishedDevices(t, kube); return len(devs) == 8 })
	admin, err := nvml.Open("mock:nvlink-pairs", nvml.Options{StateFile: filepath.Join(dir, "plugin", "mock.json")})
	if err != nil {
		t.Fatal(err)
	}
	g := d.State.GPUs()[5]
	p, _ := g.ProfileByName("3g.40gb")
	for _, pl := range p.Placements {
		if _, err := admin.CreateMIG(t.Context(), g.UUID, p.ID, pl); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "two static MIG devices instead of gpu-5", func() bool {
		devs, _ := publishedDevices(t, kube)
		names := map[string]bool{}
		for _, dv := range devs {
			names[dv.Name] = true
		}
		return len(devs) == 9 && !names["gpu-5"] && names[model.StaticMIGName(5, 0, 0)] && names[model.StaticMIGName(5, 1, 0)]
	})
}
