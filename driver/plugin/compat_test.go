package plugin

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/slices"
)

func slice(name, driver, node string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: devices}}
}

func device(name string, ours bool) resourceapi.Device {
	d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}}}
	if ours {
		d.Attributes[slices.AttrImplementation] = resourceapi.DeviceAttribute{StringValue: ptr.To(slices.Implementation)}
	}
	return d
}

func TestCheckNoForeignSlices(t *testing.T) {
	tests := []struct {
		name   string
		objs   []runtime.Object
		errHas string
	}{
		{"none", nil, ""},
		{"ours on other nodes", []runtime.Object{slice("a", model.CompatDriverName, "node-b", device("gpu-0", true)), slice("b", model.CompatDriverName, "node-c", device("gpu-0", true))}, ""},
		{"neuronetes driver name", []runtime.Object{slice("a", model.DriverName, "node-b", device("gpu-0", false))}, ""},
		{"nvidia's driver", []runtime.Object{slice("a", model.CompatDriverName, "node-b", device("gpu-0", true)), slice("c", model.CompatDriverName, "node-c", device("gpu-0", false))},
			"another gpu.nvidia.com driver already publishes ResourceSlices (pools node-c/node-c)"},
	}
	for _, tc := range tests {
		err := CheckNoForeignSlices(context.Background(), fake.NewSimpleClientset(tc.objs...), model.CompatDriverName)
		if tc.errHas == "" && err != nil || tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.errHas)
		}
	}
}

// TestCompatModeStart: compatibility mode refuses to start next to NVIDIA's driver, and otherwise
// publishes under gpu.nvidia.com with NVIDIA's attributes and CDI kind.
func TestCompatModeStart(t *testing.T) {
	compat := func(o *Options) {
		o.DriverName, o.Slices = model.CompatDriverName, slices.Options{Compat: true, Profiles: []string{"1g.10gb"}}
	}
	if _, err := tryStart(t, t.TempDir(), newKube(slice("nv", model.CompatDriverName, "node-x", device("gpu-0", false))), compat); err == nil || !strings.Contains(err.Error(), "uninstall NVIDIA's DRA driver") {
		t.Fatalf("start next to NVIDIA's driver: err %v", err)
	}
	d, kube := startDriverOpts(t, t.TempDir(), newKube(), compat)
	eventually(t, "compat slices", func() bool { devs, _ := publishedDevices(t, kube); return len(devs) == 64 })
	list, _ := kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	for _, s := range list.Items {
		if s.Spec.Driver != model.CompatDriverName {
			t.Fatalf("slice %s has driver %s", s.Name, s.Spec.Driver)
		}
		for _, dv := range s.Spec.Devices {
			if b := dv.Attributes[slices.AttrBrand].StringValue; b == nil || *b != "Nvidia" {
				t.Errorf("%s: brand %v", dv.Name, b)
			}
		}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-c"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: model.CompatDriverName, Pool: "node-a", Device: "gpu-3"}}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || res["uid-c"].Err != nil || !strings.HasPrefix(res["uid-c"].Devices[0].CDIDeviceIDs[0], "k8s.gpu.nvidia.com/claim=") {
		t.Fatalf("prepare: %+v %v", res, err)
	}
}

// recorder captures the object references of events.
type recorder struct{ refs []corev1.ObjectReference }

func (r *recorder) Event(obj runtime.Object, _, _, _ string) {
	r.refs = append(r.refs, *obj.(*corev1.ObjectReference))
}
func (r *recorder) Eventf(obj runtime.Object, t, reason, f string, _ ...any) {
	r.Event(obj, t, reason, f)
}
func (r *recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, t, reason, f string, _ ...any) {
	r.Event(obj, t, reason, f)
}

// TestNodeEventsCarryNodeUID: node events name the Node's real UID (it was the node's name), read
// once the Node can be read.
func TestNodeEventsCarryNodeUID(t *testing.T) {
	kube := fake.NewSimpleClientset()
	r := &recorder{}
	ev := NodeEvents(context.Background(), kube, r, "node-a")
	ev("Warning", "X", "before the node exists")
	if _, err := kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "3f2a-uid"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev("Warning", "Y", "after")
	ev("Warning", "Z", "cached")
	if len(r.refs) != 3 || r.refs[0].UID != "" || r.refs[1].UID != "3f2a-uid" || r.refs[2].UID != "3f2a-uid" || r.refs[1].Kind != "Node" || r.refs[1].Name != "node-a" {
		t.Errorf("event references %+v", r.refs)
	}
}
