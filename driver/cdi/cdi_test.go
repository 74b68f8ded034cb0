package cdi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestWriteRemove(t *testing.T) {
	dir := t.TempDir()
	devRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(devRoot, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Only /dev/nvidia1 and /dev/nvidiactl "exist".
	for _, n := range []string{"dev/nvidia1", "dev/nvidiactl"} {
		if err := os.WriteFile(filepath.Join(devRoot, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.DevRoot = devRoot
	ids, err := w.Write("uid-1", []Device{
		{Name: "gpu-0", UUID: "GPU-a", DeviceNodes: []string{"/dev/nvidia0"}},
		{Name: "gpu-1", UUID: "GPU-b", DeviceNodes: []string{"/dev/nvidia1"}, Env: []string{"X=1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0][0] != "k8s.gpu.neuronetes.io/claim=uid-1-gpu-0" || ids[0][1] != "k8s.gpu.neuronetes.io/claim=uid-1" || len(ids[1]) != 1 {
		t.Fatalf("ids = %v", ids)
	}
	raw, err := os.ReadFile(w.Path("uid-1"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	byName := map[string]cdispec.Device{}
	for _, d := range spec.Devices {
		byName[d.Name] = d
	}
	if n := byName["uid-1-gpu-0"].ContainerEdits.DeviceNodes; len(n) != 0 {
		t.Errorf("missing device node published: %v", n[0])
	}
	if n := byName["uid-1-gpu-1"].ContainerEdits.DeviceNodes; len(n) != 1 || n[0].Path != "/dev/nvidia1" {
		t.Errorf("device nodes of gpu-1 = %v", n)
	}
	if env := strings.Join(byName["uid-1"].ContainerEdits.Env, " "); env != "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b" {
		t.Errorf("claim env = %q", env)
	}
	// The spec is valid for a CDI consumer (as containerd would read it).
	c, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.GetErrors(); len(errs) > 0 {
		t.Fatalf("cdi errors: %v", errs)
	}
	if c.GetDevice(ids[0][0]) == nil || c.GetDevice(ids[0][1]) == nil {
		t.Errorf("devices not resolvable: %v", c.ListDevices())
	}
	if err := w.Remove("uid-1"); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove("uid-1"); err != nil {
		t.Errorf("second remove: %v", err)
	}
	if _, err := os.Stat(w.Path("uid-1")); !os.IsNotExist(err) {
		t.Errorf("spec still there: %v", err)
	}
}
