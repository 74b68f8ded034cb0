package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/plugin"
)

// stage is one step of the prepare path, measured on its own so that the table shows where the
// time of a prepare goes. The steps run against their own files in the same directories as the
// plugin, never against the plugin's checkpoint.
type stage struct {
	name string
	// before, when set, runs untimed before each run.
	before func()
	run    func(i int) error
}

// stageEnv is what the stage measurements need from the running benchmark.
type stageEnv struct {
	ctx     context.Context
	dir     string
	cdiDir  string
	inPlace bool // the checkpoint save mode of the plugin under test
	kube    kubernetes.Interface
	client  drapb.DRAPluginClient
	backend *nvml.Backend
	driver  *plugin.Driver
	// claimName is an existing claim in namespace "bench" (for the API GET).
	claimName string
}

// stages returns the prepare path's steps. The checkpoint steps use a store holding one completed
// claim, the size the plugin's checkpoint has during the benchmark.
func stages(e stageEnv) ([]stage, error) {
	gpus, err := nvml.Inventory(e.ctx, e.backend)
	if err != nil {
		return nil, err
	}
	// The last GPU is not used by the scenarios; its 1g.10gb profile at its third placement is what
	// the MIG scenario creates on its own GPU.
	g := gpus[len(gpus)-1]
	prof, ok := g.ProfileByName("1g.10gb")
	if !ok || len(prof.Placements) < 3 {
		return nil, fmt.Errorf("gpu %s: no 1g.10gb profile with 3 placements", g.UUID)
	}
	pid, pl := prof.ID, prof.Placements[2]
	store := &checkpoint.Store{Path: filepath.Join(e.dir, "stage-checkpoint.json"), BootID: checkpoint.BootID(), InPlace: e.inPlace}
	w, err := cdi.NewWriter(e.cdiDir)
	if err != nil {
		return nil, err
	}
	data := checkpoint.Data{Claims: map[string]checkpoint.Claim{"stage-uid": {
		UID: "stage-uid", Namespace: "bench", Name: "stage", State: checkpoint.PrepareCompleted,
		Devices: []checkpoint.Device{{Requests: []string{"gpu"}, Pool: node, Name: "gpu-5-mig-1g-10gb-p2", GPUUUID: "GPU-stage",
			MIGProfileID: &pid, Placement: &pl, Dynamic: true, MIG: &model.MIGInstance{ProfileID: pid, GIID: 9, CIID: 0, Placement: pl, UUID: "MIG-stage"},
			CDIDeviceIDs: []string{w.DeviceID("stage-uid", "gpu-5-mig-1g-10gb-p2"), w.ClaimDeviceID("stage-uid")}}},
	}}}
	if err := store.Save(data); err != nil {
		return nil, err
	}
	saveName := "checkpoint save (1 claim, temp+fsync+rename)"
	if e.inPlace {
		saveName = "checkpoint save (1 claim, in place, fdatasync)"
	}
	gpu := g.UUID
	return []stage{
		{name: "API GET of the claim (client-go fake)", run: func(int) error {
			_, err := e.kube.ResourceV1().ResourceClaims("bench").Get(e.ctx, e.claimName, metav1.GetOptions{})
			return err
		}},
		{name: "gRPC round trip (unprepare, no claim)", run: func(i int) error {
			_, err := e.client.NodeUnprepareResources(e.ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
				{Namespace: "bench", Name: "none", Uid: fmt.Sprintf("none-%d", i)}}})
			return err
		}},
		{name: "gRPC round trip after 1 ms idle", before: func() { time.Sleep(time.Millisecond) }, run: func(i int) error {
			_, err := e.client.NodeUnprepareResources(e.ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
				{Namespace: "bench", Name: "none", Uid: fmt.Sprintf("none-%d", i)}}})
			return err
		}},
		{name: "plugin unprepare call after 1 ms idle", before: func() { time.Sleep(time.Millisecond) }, run: func(i int) error {
			_, err := e.driver.UnprepareResourceClaims(e.ctx, []kubeletplugin.NamespacedObject{{UID: types.UID(fmt.Sprintf("none-%d", i))}})
			return err
		}},
		{name: "checkpoint load (1 claim)", run: func(int) error {
			_, _, err := store.Load()
			return err
		}},
		{name: saveName, run: func(int) error { return store.Save(data) }},
		{name: "checkpoint intent (1 claim, no sync)", run: func(int) error { return store.SaveIntent(data) }},
		{name: "CDI spec write", run: func(i int) error {
			_, err := w.Write("stage-uid", []cdi.Device{{Name: "gpu-3", UUID: "GPU-stage", DeviceNodes: []string{"/dev/nvidia3"}}})
			return err
		}},
		{name: "GPU model from NVML (mock)", run: func(int) error {
			_, err := e.backend.GPU(e.ctx, gpu)
			return err
		}},
		{name: "MIG create+destroy (mock NVML)", run: func(int) error {
			in, err := e.backend.CreateMIG(e.ctx, gpu, pid, pl)
			if err != nil {
				return err
			}
			return e.backend.DestroyMIG(e.ctx, gpu, in.GIID)
		}},
	}, nil
}

// measure runs a stage n times and returns the latencies.
func (s stage) measure(n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		if s.before != nil {
			s.before()
		}
		start := time.Now()
		if err := s.run(i); err != nil {
			return nil, fmt.Errorf("stage %q: %w", s.name, err)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
