package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/scale"
)

// TestScaleSmallRun runs the scale benchmark's library end to end at a small size: 6 kwok GPU nodes
// with the driver's slices, 40 pods of the four kinds, for the whole-GPU baseline and the
// mig-selected and demand-shaped layouts. Every pod must be bound with a consistent allocation, the scheduler's
// histograms must have recorded the phases, and nothing of the run may be left behind.
func TestScaleSmallRun(t *testing.T) {
	e := requireEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runID := kwokRun(t, e)
	cs := e.Kube
	p := cluster.NewPaths(e.Root)
	scraper, err := scale.NewScraper(fmt.Sprintf("https://127.0.0.1:%d/metrics", cluster.SchedulerPort),
		filepath.Join(p.PKI, "admin.crt"), filepath.Join(p.PKI, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, name := range []string{"kube-apiserver", "kube-scheduler"} {
		if pids[name], err = scale.PidFromFile(filepath.Join(p.Run, name+".pid")); err != nil {
			t.Fatal(err)
		}
	}
	gpus, err := scale.Inventory(ctx, "dgxh100", "class-check")
	if err != nil {
		t.Fatal(err)
	}
	devices, err := scale.LayoutDevices(gpus, scale.LayoutMIGAll, runID)
	if err != nil {
		t.Fatal(err)
	}
	classes, src, warnings, err := scale.EnsureDeviceClasses(ctx, cs, nil, devices, runID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device classes %v %v", src, warnings)
	nvDevices, err := scale.LayoutDevices(gpus, scale.LayoutNVIDIA, runID)
	if err != nil {
		t.Fatal(err)
	}
	if err := scale.EnsureNVIDIAClasses(ctx, cs, nil, nvDevices, runID); err != nil {
		t.Fatal(err)
	}
	nodes, err := scale.CreateNodes(ctx, cs, runID, "nn-scale-test-", 0, 6, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mix := scale.DefaultMix(40)
	if err := mix.CheckFits(len(nodes), 8); err != nil {
		t.Fatal(err)
	}
	var results []scale.RunResult
	for _, name := range []string{scale.LayoutWhole, scale.LayoutMIGSelected, scale.LayoutMIGDemand, scale.LayoutNVIDIA} {
		layout, _ := scale.LayoutByName(name)
		ns := fmt.Sprintf("scale-%s-%s", runID, name)
		res, err := scale.Run(ctx, scale.Config{
			Client: cs, Scraper: scraper, Pids: pids, RunID: runID, Namespace: ns, Nodes: nodes, Layout: layout,
			GPUProfile: "dgxh100", Mix: mix, Image: cluster.PauseImage, Classes: classes, PhaseTimeout: time.Minute, VerifyNodes: len(nodes),
		})
		var out strings.Builder
		scale.WriteRun(&out, res)
		t.Log(out.String())
		if err != nil {
			t.Fatalf("layout %s: %v", name, err)
		}
		v := res.Verify
		if !v.OK() || v.Pods != mix.Total() || v.CheckedNodes == 0 || v.Pairs != mix[scale.KindPair] {
			t.Errorf("layout %s: verification %+v", name, v)
		}
		for _, ph := range res.Phases {
			if ph.Attempt.N < ph.Pods || ph.Bound != ph.Pods {
				t.Errorf("layout %s phase %s: %d bound, scheduler recorded %d scheduled attempts for %d pods", name, ph.Kind, ph.Bound, ph.Attempt.N, ph.Pods)
			}
		}
		if u := res.Usage["kube-scheduler"]; u.CPU <= 0 || u.PeakRSS <= 0 {
			t.Errorf("layout %s: scheduler usage not sampled: %+v", name, u)
		}
		results = append(results, res)
		if err := scale.DeleteNamespace(ctx, cs, ns); err != nil {
			t.Fatal(err)
		}
		if err := scale.DeleteSlices(ctx, cs, scale.LabelRun+"="+runID); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	v := scale.WriteComparison(&out, results[0], results)
	t.Log(out.String())
	var nvOut strings.Builder
	nvV := scale.WriteNVIDIAComparison(&nvOut, results)
	t.Log(nvOut.String())
	t.Logf("not judged here (a smoke run at a few nodes; make bench-scale judges the scale benchmark): %s; %s", v, nvV)
	if n := results[3]; !nvV.Judged || n.DevicesPerNode <= results[2].DevicesPerNode {
		t.Errorf("nvidia-dynamic: verdict %+v, %d devices per node; want it judged and more devices than mig-demand's %d", nvV, n.DevicesPerNode, results[2].DevicesPerNode)
	}
	if want := 8 * 10; results[1].DevicesPerNode != want {
		t.Errorf("mig-selected devices per node %d, want %d", results[1].DevicesPerNode, want)
	}
	// The demand-shaped layout finds, from the API, exactly the profiles the pods request.
	if d := results[2]; d.DevicesPerNode != 8*10 || strings.Join(d.Profiles, ",") != strings.Join(scale.UsedProfiles(), ",") {
		t.Errorf("mig-demand: %d devices per node, profiles %v; want 80 and %v", d.DevicesPerNode, d.Profiles, scale.UsedProfiles())
	}
	if !v.Judged || v.Nodes != len(nodes) {
		t.Errorf("verdict %+v: want the mig-demand layout judged", v)
	}
}
