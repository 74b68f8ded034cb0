package agentpool

import (
	"context"
	"fmt"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// nodeSlice is one node's slice of the driver: gpus whole GPUs in NVLink domains of domainSize
// (0: no NVLink attribute) and one MIG device, which never counts.
func nodeSlice(node string, gpus, domainSize int) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: gpuDriver, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i := 0; i < gpus; i++ {
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{gpuTypeAttr: {StringValue: ptr.To("gpu")}}
		if domainSize > 0 {
			attrs[gpuNVLinkAttr] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("d%d", i/domainSize))}
		}
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: attrs})
	}
	s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "mig-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{gpuTypeAttr: {StringValue: ptr.To("mig")}}})
	return s
}

func TestGangTooLarge(t *testing.T) {
	dgx := []resourcev1.ResourceSlice{nodeSlice("a", 8, 8), nodeSlice("b", 4, 4)}
	pairs := []resourcev1.ResourceSlice{nodeSlice("a", 8, 2)}
	other := nodeSlice("x", 16, 16)
	other.Spec.Driver = "gpu.nvidia.com"
	for _, tc := range []struct {
		name     string
		gang     nnv1.Gang
		gpu      *nnv1.GPURequest
		slices   []resourcev1.ResourceSlice
		wantFrag string // "": fits or not judged
	}{
		{"node: 2 × 4 fits 8", nnv1.Gang{Size: 2, Topology: nnv1.GangTopologyNode}, &nnv1.GPURequest{Count: 4}, dgx, ""},
		{"node: 3 × 4 over 8", nnv1.Gang{Size: 3, Topology: nnv1.GangTopologyNode}, &nnv1.GPURequest{Count: 4}, dgx, "spec.gang.size: 3 pods × spec.gpu.count 4 = 12 GPUs in one node, but the largest node"},
		{"nvlink pairs: 2 × 1 fits", nnv1.Gang{Size: 2, Topology: nnv1.GangTopologyNVLinkDomain}, &nnv1.GPURequest{Count: 1}, pairs, ""},
		{"nvlink pairs: 2 × 2 over 2", nnv1.Gang{Size: 2, Topology: nnv1.GangTopologyNVLinkDomain}, &nnv1.GPURequest{Count: 2}, pairs, "= 4 GPUs in one NVLink domain, but the largest NVLink domain in the cluster's ResourceSlices (driver gpu.neuronetes.io) has 2"},
		{"no topology: not judged", nnv1.Gang{Size: 64}, &nnv1.GPURequest{Count: 8}, dgx, ""},
		{"MIG class: not judged", nnv1.Gang{Size: 64, Topology: nnv1.GangTopologyNode}, &nnv1.GPURequest{MIGProfile: "1g.10gb"}, dgx, ""},
		{"no GPU: not judged", nnv1.Gang{Size: 64, Topology: nnv1.GangTopologyNode}, nil, dgx, ""},
		{"no slices of the driver: not judged", nnv1.Gang{Size: 3, Topology: nnv1.GangTopologyNode}, &nnv1.GPURequest{Count: 8}, []resourcev1.ResourceSlice{other}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass(tc.gpu)
			class.Spec.Gang = &tc.gang
			got := gangTooLarge(class, tc.slices)
			if (tc.wantFrag == "") != (got == "") || !strings.Contains(got, tc.wantFrag) {
				t.Errorf("got %q, want one containing %q", got, tc.wantFrag)
			}
		})
	}
}

// TestReconcileGangTooLarge: a gang no node can hold gets Ready False, reason GangTooLarge naming
// spec.gang.size, and no pod or PodGroup; once a large enough node publishes its slice, the
// replica is created.
func TestReconcileGangTooLarge(t *testing.T) {
	class := testClass(&nnv1.GPURequest{Count: 4})
	class.Spec.Gang = &nnv1.Gang{Size: 3, Topology: nnv1.GangTopologyNode}
	pool := testPool(1)
	pool.Spec.PrewarmPercent = nil
	pool.Spec.MinReplicas = ptrInt32(1)
	small := nodeSlice("a", 8, 8)
	h := newHarness(t, class, pool, &small)
	if err := schedv1beta1.AddToScheme(h.r.Scheme); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	c := meta.FindStatusCondition(h.pool().Status.Conditions, nnv1.AgentPoolReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != gangTooLargeWhy || !strings.Contains(c.Message, "spec.gang.size") {
		t.Fatalf("Ready condition %+v, want False GangTooLarge naming spec.gang.size", c)
	}
	if n := len(h.pods()["serving"]); n != 0 {
		t.Fatalf("%d pods created for a gang no node holds, want 0", n)
	}
	big := nodeSlice("b", 16, 16)
	if err := h.c.Create(context.Background(), &big); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if n := len(h.pods()["serving"]); n != 3 {
		t.Errorf("%d pods once a 16-GPU node publishes its slice, want 3", n)
	}
}
