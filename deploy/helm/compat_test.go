package helm_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestChartCompatMode renders the chart with driver.compat=true: the driver runs with --compat and
// its plugin directory under gpu.nvidia.com, NVIDIA's DeviceClasses gpu.nvidia.com and
// mig.nvidia.com are added with NVIDIA's selectors, NeuroNetes' classes select the driver
// gpu.nvidia.com, and nvidia.com/gpu is owned by gpu.nvidia.com alone.
func TestChartCompatMode(t *testing.T) {
	objs, err := render(t, []string{"values/local.yaml"}, []string{`driver={"compat":true,"nvml":"mock:dgxa100","sharing":{"nvidiaSMI":"/x/nvidia-smi"}}`})
	if err != nil {
		t.Fatal(err)
	}
	drv := container(find(objs, "DaemonSet", "nn-neuronetes-driver"), "driver")
	a := args(drv)
	for _, want := range []string{"--compat", "--plugin-dir=/var/lib/kubelet/plugins/gpu.nvidia.com", "--nvidia-smi=/x/nvidia-smi", "--refresh-interval=1m"} {
		if !contains(a, want) {
			t.Errorf("driver args %v lack %s", a, want)
		}
	}
	if got, want := countKind(objs, "DeviceClass"), sourceDeviceClasses(t)+2; got != want {
		t.Errorf("rendered %d DeviceClasses, want %d (NeuroNetes' plus NVIDIA's two)", got, want)
	}
	owners := 0
	for _, o := range objs {
		if o.kind() != "DeviceClass" {
			continue
		}
		spec := o["spec"].(map[string]any)
		if spec["extendedResourceName"] == "nvidia.com/gpu" {
			owners++
			if o.name() != "gpu.nvidia.com" {
				t.Errorf("%s owns nvidia.com/gpu in compatibility mode", o.name())
			}
		}
		for _, sel := range spec["selectors"].([]any) {
			expr := sel.(map[string]any)["cel"].(map[string]any)["expression"].(string)
			if strings.Contains(expr, "gpu.neuronetes.io") || !strings.Contains(expr, "gpu.nvidia.com") {
				t.Errorf("%s selects %q, want the driver gpu.nvidia.com", o.name(), expr)
			}
		}
	}
	if owners != 1 {
		t.Errorf("%d classes own nvidia.com/gpu, want 1", owners)
	}
	if mig := find(objs, "DeviceClass", "mig.nvidia.com"); mig == nil {
		t.Error("no mig.nvidia.com DeviceClass")
	}
	// driver.migDemand passes --mig-demand and grants the reads the demand needs.
	demandObjs, err := render(t, []string{"values/local.yaml"}, []string{`driver={"migDemand":true,"nvml":"mock:dgxa100"}`})
	if err != nil {
		t.Fatal(err)
	}
	if !contains(args(container(find(demandObjs, "DaemonSet", "nn-neuronetes-driver"), "driver")), "--mig-demand") {
		t.Error("driver.migDemand does not pass --mig-demand")
	}
	role := find(demandObjs, "ClusterRole", "nn-neuronetes-driver")
	if !strings.Contains(fmt.Sprint(role["rules"]), "resourceclaimtemplates") || !strings.Contains(fmt.Sprint(role["rules"]), "agentpools") {
		t.Errorf("driver.migDemand: node ClusterRole lacks read access to claim templates and AgentPools: %v", role["rules"])
	}
	// Without compatibility mode nothing of it is rendered.
	plain, err := render(t, []string{"values/local.yaml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if find(plain, "DeviceClass", "gpu.nvidia.com") != nil || contains(args(container(find(plain, "DaemonSet", "nn-neuronetes-driver"), "driver")), "--compat") {
		t.Error("compatibility mode rendered without driver.compat")
	}
}
