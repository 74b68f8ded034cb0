package state

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/sharing"
)

// recorder stands in for nvidia-smi and nvidia-cuda-mps-control: it records every command; fail,
// when set, decides a command's error.
type recorder struct {
	mu   sync.Mutex
	cmds []sharing.Command
	fail func(sharing.Command) error
}

func (r *recorder) run(_ context.Context, c sharing.Command) ([]byte, error) {
	r.mu.Lock()
	r.cmds = append(r.cmds, c)
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return nil, fail(c)
	}
	return nil, nil
}

// lines returns the recorded commands as "<tool> <args> <stdin>" lines.
func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.cmds {
		l := filepath.Base(c.Path)
		if len(c.Args) > 0 {
			l += " " + strings.Join(c.Args, " ")
		}
		if c.Stdin != "" {
			l += " <" + strings.TrimSpace(c.Stdin)
		}
		out = append(out, l)
	}
	return out
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.cmds = nil
	r.mu.Unlock()
}

func (e *env) tools(r *recorder) *sharing.Tools {
	return &sharing.Tools{NvidiaSMI: "/usr/bin/nvidia-smi", MPSControl: "/usr/bin/nvidia-cuda-mps-control", MPSRoot: filepath.Join(e.dir, "mps"), Run: r.run}
}

// configClaim is a claim whose devices are allocated for the given requests (device -> request)
// with opaque configs (request list -> raw config).
func configClaim(uid string, devices [][2]string, configs ...configFor) *resourceapi.ResourceClaim {
	c := claim(uid, nil)
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: d[1], Driver: model.DriverName, Pool: node, Device: d[0]})
	}
	for _, cf := range configs {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim, Requests: cf.requests,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: model.DriverName, Parameters: runtime.RawExtension{Raw: []byte(cf.raw)}}},
		})
	}
	return c
}

type configFor struct {
	requests []string
	raw      string
}

const (
	nvGPU = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"`
	nvMIG = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig"`
)

func (e *env) uuid(t *testing.T, s *State, device string) string {
	t.Helper()
	for _, g := range s.GPUs() {
		if model.WholeGPUName(g.Index) == device {
			return g.UUID
		}
	}
	t.Fatalf("no GPU %s", device)
	return ""
}

// TestTimeSliceAppliedOnceAndRestored: a TimeSlicing claim sets the mapped time slice once, a
// second prepare (a second pod of the same claim) sets nothing, and unprepare restores the default
// only when no other claim uses the GPU.
func TestTimeSliceAppliedOnceAndRestored(t *testing.T) {
	e := &env{dir: t.TempDir()}
	r := &recorder{}
	s, _ := e.openWith(t, "boot", e.tools(r))
	ctx := context.Background()
	u0 := e.uuid(t, s, "gpu-0")
	long := configFor{[]string{"gpu"}, nvGPU + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`}
	for i := 0; i < 2; i++ {
		if _, err := s.Prepare(ctx, configClaim("ts", [][2]string{{"gpu-0", "gpu"}}, long)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := strings.Join(r.lines(), "\n"), "nvidia-smi compute-policy -i "+u0+" --set-timeslice 3"; got != want {
		t.Errorf("commands after two prepares:\n%s\nwant\n%s", got, want)
	}
	// An admin-access claim on the same GPU asking for another time slice is refused; one with the
	// same time slice shares the GPU.
	other := configClaim("other", [][2]string{{"gpu-0", "gpu"}}, configFor{nil, nvGPU + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Short"}}}`})
	other.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	if _, err := s.Prepare(ctx, other); err == nil || !strings.Contains(err.Error(), "sharing.timeSlicingConfig.interval: GPU "+u0+" runs time slice Long for claim ts") {
		t.Errorf("conflicting time slice: err %v", err)
	}
	same := configClaim("same", [][2]string{{"gpu-0", "gpu"}}, long)
	same.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	if _, err := s.Prepare(ctx, same); err != nil {
		t.Fatal(err)
	}
	r.reset()
	if err := s.Unprepare(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	if l := r.lines(); len(l) != 0 {
		t.Errorf("restored while claim 'same' still uses the GPU: %v", l)
	}
	if err := s.Unprepare(ctx, "same"); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(r.lines(), "\n"), "nvidia-smi compute-policy -i "+u0+" --set-timeslice 0"; got != want {
		t.Errorf("commands after the last unprepare:\n%s\nwant\n%s", got, want)
	}
}

// TestMPSDaemonPerConfig: an MPS config starts one daemon for its devices with the configured
// defaults, the claim's CDI spec mounts the daemon's pipe and log directories, and unprepare stops
// it and removes its directory.
func TestMPSDaemonPerConfig(t *testing.T) {
	e := &env{dir: t.TempDir()}
	r := &recorder{}
	s, _ := e.openWith(t, "boot", e.tools(r))
	ctx := context.Background()
	u2, u3 := e.uuid(t, s, "gpu-2"), e.uuid(t, s, "gpu-3")
	mps := configFor{[]string{"gpus"}, nvGPU + `,"sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"1":"1Gi"}}}}`}
	c := configClaim("m", [][2]string{{"gpu-2", "gpus"}, {"gpu-3", "gpus"}, {"gpu-4", "other"}}, mps)
	if _, err := s.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"nvidia-cuda-mps-control -d",
		"nvidia-cuda-mps-control <set_default_active_thread_percentage 50",
	}
	lims := map[string]string{u2: "10240M", u3: "1024M"}
	for _, u := range sortedKeys(lims) {
		want = append(want, "nvidia-cuda-mps-control <set_default_device_pinned_mem_limit "+u+" "+lims[u])
	}
	if got := strings.Join(r.lines(), "\n"); got != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	pipe := filepath.Join(e.dir, "mps", "m-0", "pipe")
	for _, env := range []string{"CUDA_VISIBLE_DEVICES=" + u2 + "," + u3, "CUDA_MPS_PIPE_DIRECTORY=" + pipe} {
		if !contains(r.cmds[0].Env, env) {
			t.Errorf("daemon env %v lacks %s", r.cmds[0].Env, env)
		}
	}
	if _, err := os.Stat(pipe); err != nil {
		t.Errorf("pipe directory: %v", err)
	}
	spec, _ := os.ReadFile(s.cfg.CDI.Path("m"))
	if !strings.Contains(string(spec), `"hostPath":"`+pipe+`","containerPath":"/tmp/nvidia-mps"`) || strings.Count(string(spec), "/tmp/nvidia-mps") != 2*2 {
		t.Errorf("CDI spec does not mount the pipe directory into the two MPS devices only: %s", spec)
	}
	r.reset()
	if err := s.Unprepare(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.lines(), "\n"); got != "nvidia-cuda-mps-control <quit" {
		t.Errorf("commands at unprepare: %s", got)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "mps", "m-0")); !os.IsNotExist(err) {
		t.Errorf("daemon directory left: %v", err)
	}
}

// TestConfigKinds: NVIDIA's kinds apply only to their device type, as in NVIDIA's driver; a
// config for a request reaches its subrequests (firstAvailable).
func TestConfigKinds(t *testing.T) {
	e := &env{dir: t.TempDir()}
	r := &recorder{}
	s, _ := e.openWith(t, "boot", e.tools(r))
	ctx := context.Background()
	neuro := `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`
	tests := []struct {
		name    string
		devices [][2]string
		configs []configFor
		errHas  string
		envHas  string
	}{
		{"gpu config on a mig device", [][2]string{{"gpu-1-mig-1g-10gb-p0", "mig"}}, []configFor{{[]string{"mig"}, nvGPU + `}`}},
			`cannot apply GpuConfig (resource.nvidia.com/v1beta1) to device "gpu-1-mig-1g-10gb-p0" of type "mig"`, ""},
		{"mig config on a gpu", [][2]string{{"gpu-1", "gpu"}}, []configFor{{[]string{"gpu"}, nvMIG + `}`}},
			`cannot apply MigDeviceConfig (resource.nvidia.com/v1beta1) to device "gpu-1" of type "gpu"`, ""},
		{"mig config for all requests skips a gpu", [][2]string{{"gpu-1", "gpu"}}, []configFor{{nil, neuro}, {nil, nvMIG + `}`}}, "", "NEURONETES_GPU_SHARING=TimeSlicing"},
		{"vfio", [][2]string{{"gpu-1", "gpu"}}, []configFor{{nil, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`}}, "is not supported", ""},
		{"time slice on a mig device", [][2]string{{"gpu-1-mig-1g-10gb-p0", "mig"}},
			[]configFor{{nil, `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`}},
			"sharing.timeSlicing.interval: device gpu-1-mig-1g-10gb-p0 is a MIG device", ""},
		{"subrequest gets its request's config", [][2]string{{"gpu-1-mig-1g-10gb-p0", "gpu/mig"}}, []configFor{{[]string{"gpu"}, neuro}}, "", "NEURONETES_GPU_SHARING=TimeSlicing"},
		{"subrequest named", [][2]string{{"gpu-1-mig-1g-10gb-p0", "gpu/mig"}}, []configFor{{[]string{"gpu/mig"}, neuro}, {[]string{"gpu/whole"}, nvGPU + `}`}}, "", "NEURONETES_GPU_SHARING=TimeSlicing"},
	}
	for i, tc := range tests {
		uid := string(rune('a' + i))
		_, err := s.Prepare(ctx, configClaim(uid, tc.devices, tc.configs...))
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		spec, _ := os.ReadFile(s.cfg.CDI.Path(uid))
		if !strings.Contains(string(spec), tc.envHas) {
			t.Errorf("%s: CDI spec lacks %q: %s", tc.name, tc.envHas, spec)
		}
		if err := s.Unprepare(ctx, types.UID(uid)); err != nil {
			t.Fatal(err)
		}
	}
	if l := r.lines(); len(l) != 0 {
		t.Errorf("no config asked for a time slice or MPS, yet: %v", l)
	}
}

// TestCDIDescription: every device's description tells tools in the container what it is.
func TestCDIDescription(t *testing.T) {
	e := &env{dir: t.TempDir()}
	s, _ := e.open(t, "boot")
	if _, err := s.Prepare(context.Background(), claim("d", []string{"gpu-5-mig-3g-40gb-p4"})); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(s.cfg.CDI.Path("d"))
	var spec struct {
		Devices []struct {
			ContainerEdits struct{ Env []string } `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	var desc cdi.Description
	for _, v := range spec.Devices[0].ContainerEdits.Env {
		if k, val, _ := strings.Cut(v, "="); k == cdi.DescriptionEnv("gpu-5-mig-3g-40gb-p4") {
			if err := json.Unmarshal([]byte(val), &desc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if desc.Index != 5 || desc.Profile != "3g.40gb" || !strings.HasPrefix(desc.MIGUUID, "MIG-") || desc.UUID != e.uuid(t, s, "gpu-5") || desc.ProductName != "NVIDIA H100 80GB HBM3" {
		t.Errorf("description %+v", desc)
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
