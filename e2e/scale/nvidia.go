package scale

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// LayoutNVIDIA is the layout NVIDIA's DRA driver publishes for the same GPUs with dynamic MIG:
// every profile at every placement, partitionable with shared counters, under its driver name and
// with its attributes (the driver's compatibility mode builds exactly that). Its claims are written
// as NVIDIA's users write them: DeviceClass mig.nvidia.com and the profile in the request's
// selector. It is the denominator of TargetNVIDIARatio.
const LayoutNVIDIA = "nvidia-dynamic"

// NVIDIA's DeviceClass names (deploy/deviceclasses/compat/nvidia.yaml).
const (
	NVIDIAClassGPU = "gpu.nvidia.com"
	NVIDIAClassMIG = "mig.nvidia.com"
)

// TargetNVIDIARatio is issue 33's restatement of the MIG scheduling cost: the MIG-claim pods'
// scheduling-algorithm p99 with NeuroNetes' demand-shaped slices at most that with the slices
// NVIDIA's driver publishes, same nodes and run.
const TargetNVIDIARatio = 1.0

// Driver returns the driver name the layout's slices are published under.
func (l Layout) Driver() string {
	if l.Options.Compat {
		return model.CompatDriverName
	}
	return model.DriverName
}

// NVIDIAClaimSpec returns the claim of one pod of kind k against NVIDIA's slices and classes.
func NVIDIAClaimSpec(k Kind) resourceapi.ResourceClaimSpec {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: NVIDIAClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	var constraints []resourceapi.DeviceConstraint
	switch {
	case k == KindPair:
		req.Count = 2
		constraints = []resourceapi.DeviceConstraint{{
			Requests:       []string{"gpu"},
			MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(model.CompatDriverName + "/" + slices.AttrNVLinkDomain)),
		}}
	case k.IsMIG():
		req.DeviceClassName = NVIDIAClassMIG
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].profile == %q", model.CompatDriverName, migProfile[k]),
		}}}
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests:    []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}},
		Constraints: constraints,
	}}
}

// LayoutClaim returns the pre-created claim of one pod for the layout: NVIDIA's classes and
// selectors for LayoutNVIDIA, else Claim with the standard classes.
func LayoutClaim(name, runID string, k Kind, layout Layout, classes map[string]string) *resourceapi.ResourceClaim {
	if !layout.Options.Compat {
		return Claim(name, runID, k, layout.MIG, classes)
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: runLabels(runID, "kind", string(k))},
		Spec:       NVIDIAClaimSpec(k),
	}
}

// NVIDIADeviceClasses returns NVIDIA's two classes as its driver's chart defines them, for when
// neither the cluster nor deploy/deviceclasses/compat has them.
func NVIDIADeviceClasses() []*resourceapi.DeviceClass {
	mk := func(name, typ string) *resourceapi.DeviceClass {
		expr := fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", model.CompatDriverName, model.CompatDriverName, typ)
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}},
		}}
	}
	return []*resourceapi.DeviceClass{mk(NVIDIAClassGPU, slices.TypeGPU), mk(NVIDIAClassMIG, slices.TypeMIG)}
}

// EnsureNVIDIAClasses makes sure NVIDIA's two classes exist and select NVIDIA's devices: a class
// the cluster has is checked and used; else the one of fromFiles (or NVIDIADeviceClasses) is
// created with the run label, without its extended resource name (which the cluster's own GPU
// class may hold), so Cleanup deletes it.
func EnsureNVIDIAClasses(ctx context.Context, cs kubernetes.Interface, fromFiles []*resourceapi.DeviceClass, devices []resourceapi.Device, runID string) error {
	files := map[string]*resourceapi.DeviceClass{}
	for _, dc := range fromFiles {
		files[dc.Name] = dc
	}
	api := cs.ResourceV1().DeviceClasses()
	for _, fb := range NVIDIADeviceClasses() {
		existing, err := api.Get(ctx, fb.Name, metav1.GetOptions{})
		if err == nil {
			if err := CheckDeviceClass(ctx, existing, model.CompatDriverName, devices); err != nil {
				return fmt.Errorf("the cluster's device class %s does not work on NVIDIA's layout: %w", fb.Name, err)
			}
			continue
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("device class %s: %w", fb.Name, err)
		}
		dc := fb
		if f := files[fb.Name]; f != nil {
			dc = f.DeepCopy()
		}
		if err := CheckDeviceClass(ctx, dc, model.CompatDriverName, devices); err != nil {
			return err
		}
		dc.ObjectMeta = metav1.ObjectMeta{Name: dc.Name, Labels: runLabels(runID)}
		dc.Spec.ExtendedResourceName = nil
		if _, err := api.Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating device class %s: %w", dc.Name, err)
		}
	}
	return nil
}
