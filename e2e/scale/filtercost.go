package scale

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// SchedulerFeatures are the DRA allocator features kube-scheduler 1.37 enables by default (its
// feature gates' defaults): they select the same allocator implementation as the real scheduler.
var SchedulerFeatures = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	DeviceBindingAndStatus:  true,
	ConsumableCapacity:      true,
	FractionalCapacityRange: true,
}

// classList is a static DeviceClassLister.
type classList []*resourceapi.DeviceClass

func (c classList) List() ([]*resourceapi.DeviceClass, error) { return c, nil }

func (c classList) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, dc := range c {
		if dc.Name == name {
			return dc, nil
		}
	}
	return nil, fmt.Errorf("device class %q not found", name)
}

// FilterSim runs the scheduler's own DRA allocator (k8s.io/dynamic-resource-allocation/structured,
// the code behind the DynamicResources plugin's Filter) in-process over the slices of many nodes.
// It measures what a layout costs the scheduler per node and pod without a cluster, and it
// allocates claims one after the other like the scheduler does, so it also checks that a layout
// lets every pod that should fit be placed.
type FilterSim struct {
	nodes     []*corev1.Node
	slices    []*resourceapi.ResourceSlice
	classes   classList
	cache     *cel.Cache
	allocated sets.Set[structured.DeviceID]
	layout    Layout
}

// NewFilterSim builds nodes sim-0..sim-(n-1) with the dgxh100 inventory published in layout.
func NewFilterSim(ctx context.Context, n int, layout Layout) (*FilterSim, error) {
	s := &FilterSim{
		classes:   classList(append(FallbackDeviceClasses(), NVIDIADeviceClasses()...)),
		cache:     cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}),
		allocated: sets.New[structured.DeviceID](),
		layout:    layout,
	}
	for i := 0; i < n; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sim-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		gpus, err := Inventory(ctx, "dgxh100", node.Name)
		if err != nil {
			return nil, err
		}
		objs, err := NodeSlices(node, gpus, layout, "sim")
		if err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, node)
		s.slices = append(s.slices, objs...)
	}
	return s, nil
}

// Nodes returns the simulated nodes.
func (s *FilterSim) Nodes() []*corev1.Node { return s.nodes }

func (s *FilterSim) allocator(ctx context.Context) (structured.Allocator, error) {
	state := structured.AllocatedState{
		AllocatedDevices:         s.allocated,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	return structured.NewAllocator(ctx, SchedulerFeatures, state, s.classes, s.slices, s.cache)
}

// Filter runs one pod's Filter over every node: an allocation attempt for a claim of kind k on
// each, as the scheduler does for the nodes it examines. It returns the nodes that fit, in order,
// with the allocation found on each.
func (s *FilterSim) Filter(ctx context.Context, k Kind) ([]string, map[string]resourceapi.AllocationResult, error) {
	a, err := s.allocator(ctx)
	if err != nil {
		return nil, nil, err
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "sim", UID: "c"}, Spec: LayoutClaim("c", "sim", k, s.layout, nil).Spec}
	var fit []string
	res := map[string]resourceapi.AllocationResult{}
	for _, node := range s.nodes {
		out, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
		if err != nil {
			return nil, nil, fmt.Errorf("node %s, kind %s: %w", node.Name, k, err)
		}
		if len(out) == 1 {
			fit = append(fit, node.Name)
			res[node.Name] = out[0]
		}
	}
	return fit, res, nil
}

// Place schedules one pod of kind k like the scheduler would with a spreading score: it filters
// every node, binds the pod to the fitting node with the fewest allocated devices and marks the
// allocation's devices as allocated. It returns the node and the allocation, or "" when no node
// fits. used counts the devices allocated per node.
func (s *FilterSim) Place(ctx context.Context, k Kind, used map[string]int) (string, resourceapi.AllocationResult, error) {
	fit, res, err := s.Filter(ctx, k)
	if err != nil || len(fit) == 0 {
		return "", resourceapi.AllocationResult{}, err
	}
	sort.SliceStable(fit, func(i, j int) bool { return used[fit[i]] < used[fit[j]] })
	node := fit[0]
	for _, r := range res[node].Devices.Results {
		s.allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
	}
	used[node] += len(res[node].Devices.Results)
	return node, res[node], nil
}
