// Package scale is the scheduler scale benchmark: it publishes the DRA driver's own ResourceSlices
// (driver/slices.Build over the driver's NVML mock inventory) for many kwok GPU nodes, creates pods
// with pre-created ResourceClaims of four kinds, and measures the real kube-scheduler through its
// own metrics and through the time from pod creation to binding.
//
// Invariant: every object the benchmark creates (nodes, slices, namespaces, DeviceClasses it had to
// add) carries the label LabelRun, and Cleanup removes all of them, also after an interrupt.
package scale

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// Layout is one way of publishing a node's GPUs, expressed only through the driver's slice Options.
type Layout struct {
	// Name identifies the layout in reports ("whole", "mig-selected", "mig-all").
	Name string
	// MIG reports whether MIG claim kinds request MIG devices (true) or are mapped to whole GPUs.
	MIG bool
	// Demand makes Run select the MIG profiles from the cluster's requests (DemandProfiles)
	// before publishing, as the driver's --mig-demand does.
	Demand bool
	// Options are passed unchanged to slices.Build.
	Options slices.Options
}

// Layout names accepted by LayoutByName.
const (
	LayoutWhole       = "whole"
	LayoutMIGSelected = "mig-selected"
	LayoutMIGAll      = "mig-all"
	LayoutMIGMixed    = "mig-mixed"
	LayoutMIGDemand   = "mig-demand"
)

// MixedMIGGPUs is how many GPUs per node the "mig-mixed" layout partitions.
const MixedMIGGPUs = 4

// LayoutByName returns a layout: "whole" publishes whole GPUs only (the baseline), "mig-selected"
// publishes dynamic MIG limited to the profiles the benchmark's DeviceClasses select, and "mig-all"
// is the naive dynamic MIG layout with every H100 profile and placement. "mig-mixed" is
// "mig-selected" on the MixedMIGGPUs highest GPUs of each node, the others whole GPUs only.
// "mig-demand" is the demand-shaped layout a real fleet runs with the driver's --mig-demand: the
// profiles are those the cluster's claims, templates and AgentPools request, read from the API.
// LayoutNVIDIA ("nvidia-dynamic") is what NVIDIA's DRA driver publishes for the same GPUs.
func LayoutByName(name string) (Layout, error) {
	switch name {
	case LayoutWhole:
		return Layout{Name: name, Options: slices.Options{MIG: slices.MIGNone}}, nil
	case LayoutMIGSelected:
		return Layout{Name: name, MIG: true, Options: slices.Options{MIG: slices.MIGDynamic, Profiles: UsedProfiles()}}, nil
	case LayoutMIGAll:
		return Layout{Name: name, MIG: true, Options: slices.Options{MIG: slices.MIGDynamic}}, nil
	case LayoutMIGMixed:
		return Layout{Name: name, MIG: true, Options: slices.Options{MIG: slices.MIGDynamic, Profiles: UsedProfiles(), MIGGPUs: MixedMIGGPUs}}, nil
	case LayoutMIGDemand:
		return Layout{Name: name, MIG: true, Demand: true, Options: slices.Options{MIG: slices.MIGDynamic, ExactProfiles: true}}, nil
	case LayoutNVIDIA:
		return Layout{Name: name, MIG: true, Options: slices.Options{MIG: slices.MIGDynamic, Compat: true}}, nil
	}
	return Layout{}, fmt.Errorf("layout %q: want one of %s, %s, %s, %s, %s, %s", name, LayoutWhole, LayoutMIGSelected, LayoutMIGAll, LayoutMIGMixed, LayoutMIGDemand, LayoutNVIDIA)
}

// Inventory returns the device model of one simulated node from the driver's NVML mock. The seed
// (the node name) makes GPU UUIDs differ between nodes, as on a real fleet.
func Inventory(ctx context.Context, profile, node string) ([]model.GPUInfo, error) {
	b, err := nvml.Open("mock:"+profile, nvml.Options{Seed: node})
	if err != nil {
		return nil, fmt.Errorf("inventory of node %s: %w", node, err)
	}
	defer b.Close()
	gpus, err := nvml.Inventory(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("inventory of node %s: %w", node, err)
	}
	return gpus, nil
}

// NodeSlices returns the ResourceSlice objects the driver would publish for node, built by the
// driver's own slices.Build and checked by slices.Validate. Slices are owned by the node (so the
// garbage collector removes them with it) and carry the run label.
func NodeSlices(node metav1.Object, gpus []model.GPUInfo, layout Layout, runID string) ([]*resourceapi.ResourceSlice, error) {
	res := slices.Build(node.GetName(), gpus, layout.Options)
	if err := slices.Validate(res); err != nil {
		return nil, fmt.Errorf("layout %s for node %s: %w", layout.Name, node.GetName(), err)
	}
	return toObjects(node, res, layout.Driver(), runID), nil
}

func toObjects(node metav1.Object, res resourceslice.DriverResources, driver, runID string) []*resourceapi.ResourceSlice {
	poolNames := make([]string, 0, len(res.Pools))
	for name := range res.Pools {
		poolNames = append(poolNames, name)
	}
	sort.Strings(poolNames)
	var out []*resourceapi.ResourceSlice
	for _, poolName := range poolNames {
		pool := res.Pools[poolName]
		for i, s := range pool.Slices {
			out = append(out, &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name:   fmt.Sprintf("%s-%s-%d", node.GetName(), strings.ReplaceAll(driver, ".", "-"), i),
					Labels: runLabels(runID),
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Node", Name: node.GetName(), UID: node.GetUID(), Controller: ptr.To(true),
					}},
				},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:         driver,
					Pool:           resourceapi.ResourcePool{Name: poolName, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
					NodeName:       ptr.To(node.GetName()),
					Devices:        s.Devices,
					SharedCounters: s.SharedCounters,
				},
			})
		}
	}
	return out
}

// DeviceCount returns the number of devices and counter sets in slices, for the report.
func DeviceCount(objs []*resourceapi.ResourceSlice) (devices, counterSets int) {
	for _, o := range objs {
		devices += len(o.Spec.Devices)
		counterSets += len(o.Spec.SharedCounters)
	}
	return devices, counterSets
}

// LayoutDevices returns every device one node with gpus publishes in the named layout: what a
// DeviceClass is checked against (CheckDeviceClass) before a run uses it.
func LayoutDevices(gpus []model.GPUInfo, name, runID string) ([]resourceapi.Device, error) {
	layout, err := LayoutByName(name)
	if err != nil {
		return nil, err
	}
	objs, err := NodeSlices(&metav1.ObjectMeta{Name: "class-check"}, gpus, layout, runID)
	if err != nil {
		return nil, err
	}
	var devices []resourceapi.Device
	for _, s := range objs {
		devices = append(devices, s.Spec.Devices...)
	}
	return devices, nil
}
