package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/sharing"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// published returns the devices of the state's resources by name, with their taint keys.
func published(s *State) map[string][]string {
	out := map[string][]string{}
	for _, p := range s.Resources(nil).Pools {
		for _, sl := range p.Slices {
			for _, d := range sl.Devices {
				var keys []string
				for _, t := range d.Taints {
					keys = append(keys, t.Key)
				}
				out[d.Name] = keys
			}
		}
	}
	return out
}

// TestRefreshKeepsClaimedGPU: a GPU removed while a claim uses it stays published, tainted, until
// the claim is unprepared; a new GPU that took its index waits for that.
func TestRefreshKeepsClaimedGPU(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, b := e.open(t, "boot")
	ctx := context.Background()
	if _, err := s.Prepare(ctx, claim("hold", []string{"gpu-3"})); err != nil {
		t.Fatal(err)
	}
	full, err := nvml.Inventory(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	held := full[3].UUID
	// GPU 3 falls off the bus and a new GPU appears in its slot.
	replaced := append([]model.GPUInfo(nil), full...)
	replaced[3].UUID = "GPU-new"
	s.cfg.Inventory = func(context.Context) ([]model.GPUInfo, error) { return clone(replaced), nil }
	changed, err := s.Refresh(ctx)
	if err != nil || !changed {
		t.Fatalf("refresh: changed %v, %v", changed, err)
	}
	p := published(s)
	if keys, ok := p["gpu-3"]; !ok || strings.Join(keys, ",") != model.DriverName+"/"+TaintMissing {
		t.Errorf("gpu-3 published %v (%v), want it kept with the missing taint", ok, keys)
	}
	for _, g := range s.GPUs() {
		if g.UUID == "GPU-new" {
			t.Errorf("new GPU published under the index of the held one")
		}
	}
	if changed, _ := s.Refresh(ctx); changed {
		t.Errorf("second refresh of the same inventory reported a change")
	}
	if err := s.Unprepare(ctx, "hold"); err != nil {
		t.Fatal(err)
	}
	if _, ok := published(s)["gpu-3"]; ok {
		t.Errorf("missing gpu-3 still published after its claim is gone")
	}
	if changed, err := s.Refresh(ctx); err != nil || !changed {
		t.Fatalf("refresh after unprepare: %v %v", changed, err)
	}
	if keys, ok := published(s)["gpu-3"]; !ok || len(keys) != 0 {
		t.Errorf("new GPU at index 3: published %v, taints %v", ok, keys)
	}
	gpus := s.GPUs()
	if gpus[3].UUID != "GPU-new" || held == "GPU-new" {
		t.Errorf("gpu-3 is %s, want the new GPU", gpus[3].UUID)
	}
}

// TestRefreshStaticMIG: in static mode, instances an admin creates after start-up are published
// by the next refresh, and one an admin destroys under a prepared claim stays published.
func TestRefreshStaticMIG(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, _ := e.open(t, "boot")
	s.cfg.Slices.MIG = slices.MIGStatic
	ctx := context.Background()
	// The admin (another NVML client) partitions GPU 6.
	admin, err := nvml.Open("mock:dgxh100", nvml.Options{StateFile: filepath.Join(e.dir, "mock.json")})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := admin.GPU(ctx, s.GPUs()[6].UUID)
	in, err := admin.CreateMIG(ctx, g.UUID, 0, model.Placement{Start: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	name := model.StaticMIGName(6, in.GIID, in.CIID)
	if _, ok := published(s)[name]; ok {
		t.Fatalf("static instance published before any refresh")
	}
	if changed, err := s.Refresh(ctx); err != nil || !changed {
		t.Fatalf("refresh: %v %v", changed, err)
	}
	if _, ok := published(s)[name]; !ok {
		t.Fatalf("static instance %s not published after refresh: %v", name, published(s))
	}
	if _, err := s.Prepare(ctx, claim("st", []string{name})); err != nil {
		t.Fatal(err)
	}
	if err := admin.DestroyMIG(ctx, g.UUID, in.GIID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := published(s)[name]; !ok {
		t.Errorf("instance %s of a prepared claim dropped after the admin destroyed it", name)
	}
	if err := s.Unprepare(ctx, "st"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := published(s)[name]; ok {
		t.Errorf("destroyed instance still published after its claim is gone")
	}
}

// TestHeldProfileStaysPublished: a profile dropped from the selection stays published while a
// claim holds one of its devices.
func TestHeldProfileStaysPublished(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, _ := e.open(t, "boot")
	ctx := context.Background()
	s.SetProfiles([]string{"3g.40gb"})
	if _, err := s.Prepare(ctx, claim("held", []string{"gpu-7-mig-1g-10gb-p3"})); err != nil {
		t.Fatalf("a device of an unpublished profile must still prepare (allocated before the change): %v", err)
	}
	if _, ok := published(s)["gpu-7-mig-1g-10gb-p3"]; !ok {
		t.Errorf("held 1g.10gb device not published")
	}
	if err := s.Unprepare(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if _, ok := published(s)["gpu-7-mig-1g-10gb-p3"]; ok {
		t.Errorf("1g.10gb still published after the claim is gone")
	}
}

func clone(g []model.GPUInfo) []model.GPUInfo {
	out := make([]model.GPUInfo, len(g))
	for i := range g {
		out[i] = g[i]
		out[i].MIGInstances = append([]model.MIGInstance(nil), g[i].MIGInstances...)
	}
	return out
}

// TestCrashAfterSharingApplied: the driver dies right after setting a time slice or starting an
// MPS daemon, before the claim completes; the next start restores the time slice, stops the
// daemon and removes its directory. A daemon directory no record knows is removed too.
func TestCrashAfterSharingApplied(t *testing.T) {
	tests := []struct {
		name, config, dieOn, want string
	}{
		{"time slice", nvGPU + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Medium"}}}`, "--set-timeslice", "nvidia-smi compute-policy -i %s --set-timeslice 0"},
		{"mps", nvGPU + `,"sharing":{"strategy":"MPS"}}`, "-d", "nvidia-cuda-mps-control <quit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{dir: t.TempDir()}
			died := make(chan struct{})
			r := &recorder{fail: func(c sharing.Command) error {
				if strings.Contains(strings.Join(c.Args, " "), tc.dieOn) {
					close(died)
					select {} // the process dies here
				}
				return nil
			}}
			s, _ := e.openWith(t, "boot", e.tools(r))
			u := e.uuid(t, s, "gpu-1")
			go s.Prepare(context.Background(), configClaim("c", [][2]string{{"gpu-1", "gpu"}}, configFor{nil, tc.config})) //nolint:errcheck
			<-died
			if err := os.MkdirAll(filepath.Join(e.dir, "mps", "stray", "pipe"), 0o755); err != nil {
				t.Fatal(err)
			}
			r2 := &recorder{}
			s2, _ := e.openWith(t, "boot", e.tools(r2))
			want := tc.want
			if strings.Contains(want, "%s") {
				want = strings.Replace(want, "%s", u, 1)
			}
			if !contains(r2.lines(), want) {
				t.Errorf("start-up commands %v lack %q", r2.lines(), want)
			}
			if len(s2.Claims()) != 0 {
				t.Errorf("interrupted claim still recorded: %v", s2.Claims())
			}
			ents, _ := os.ReadDir(filepath.Join(e.dir, "mps"))
			if len(ents) != 0 {
				t.Errorf("MPS directories left: %v", ents)
			}
		})
	}
}

// TestMPSRestartedAfterDriverRestart: the daemons die with the driver's container; the next
// instance starts the daemon of every completed claim again, with the recorded settings.
func TestMPSRestartedAfterDriverRestart(t *testing.T) {
	e := &env{dir: t.TempDir()}
	r := &recorder{}
	s, _ := e.openWith(t, "boot", e.tools(r))
	cfg := configFor{nil, nvGPU + `,"sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":30}}}`}
	if _, err := s.Prepare(context.Background(), configClaim("m", [][2]string{{"gpu-0", "gpu"}}, cfg)); err != nil {
		t.Fatal(err)
	}
	r2 := &recorder{fail: func(c sharing.Command) error {
		if strings.Contains(c.Stdin, "get_server_list") {
			return errors.New("Cannot find MPS control daemon process")
		}
		return nil
	}}
	e.openWith(t, "boot", e.tools(r2))
	want := "nvidia-smi"
	got := strings.Join(r2.lines(), "\n")
	if !strings.Contains(got, "nvidia-cuda-mps-control <get_server_list\nnvidia-cuda-mps-control -d\nnvidia-cuda-mps-control <set_default_active_thread_percentage 30") || strings.Contains(got, want) {
		t.Errorf("restart commands:\n%s", got)
	}
	d, _, _ := (&checkpoint.Store{Path: filepath.Join(e.dir, "checkpoint.json")}).Load()
	if len(d.Claims["m"].MPS) != 1 {
		t.Errorf("claim record lost its daemon: %+v", d.Claims["m"])
	}
}
