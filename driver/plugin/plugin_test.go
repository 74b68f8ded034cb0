package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
)

func startDriver(t *testing.T) (*Driver, *fake.Clientset) {
	t.Helper()
	return startDriverWith(t, slices.Options{Profiles: []string{"1g.10gb"}}, nil)
}

// startDriverWith starts the driver on the nvlink-pairs mock (8 H100s) with
// the given layout; event, when not nil, receives the driver's events.
func startDriverWith(t *testing.T, layout slices.Options, event func(typ, reason, msg string)) (*Driver, *fake.Clientset) {
	t.Helper()
	return startDriverOpts(t, t.TempDir(), newKube(), func(o *Options) { o.Slices, o.Event = layout, event })
}

// newKube returns a fake clientset with the node that names slices with their GenerateName.
func newKube(objs ...runtime.Object) *fake.Clientset {
	kube := fake.NewSimpleClientset(append([]runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}}}, objs...)...)
	// The fake ignores GenerateName; the slice controller relies on it.
	var seq atomic.Int32
	kube.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if obj.Name == "" {
			obj.Name = fmt.Sprintf("%s%d", obj.GenerateName, seq.Add(1))
		}
		return false, nil, nil
	})
	return kube
}

// startDriverOpts starts the driver in dir (its plugin directory, checkpoint and mock state
// survive a restart in the same dir) with options adjusted by set.
func startDriverOpts(t *testing.T, dir string, kube *fake.Clientset, set func(*Options)) (*Driver, *fake.Clientset) {
	t.Helper()
	d, err := tryStart(t, dir, kube, set)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d, kube
}

func tryStart(t *testing.T, dir string, kube *fake.Clientset, set func(*Options)) (*Driver, error) {
	t.Helper()
	b, err := nvml.Open("mock:nvlink-pairs", nvml.Options{StateFile: filepath.Join(dir, "plugin", "mock.json")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o := Options{
		NodeName: "node-a", Kube: kube, Backend: b,
		PluginDir: filepath.Join(dir, "plugin"), RegistrarDir: filepath.Join(dir, "reg"), CDIDir: filepath.Join(dir, "cdi"),
	}
	if set != nil {
		set(&o)
	}
	return Start(ctx, o)
}

func publishedDevices(t *testing.T, kube *fake.Clientset) ([]resourceapi.Device, int) {
	list, err := kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var devs []resourceapi.Device
	for _, s := range list.Items {
		devs = append(devs, s.Spec.Devices...)
	}
	return devs, len(list.Items)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPublishPrepareAndHealth(t *testing.T) {
	d, kube := startDriver(t)
	// 8 GPUs x (whole + 7 x 1g.10gb) = 64 devices, plus one counter slice.
	eventually(t, "slices published", func() bool { devs, n := publishedDevices(t, kube); return len(devs) == 64 && n >= 2 })

	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{
		{Request: "mig", Driver: model.DriverName, Pool: "node-a", Device: "gpu-1-mig-1g-10gb-p3"},
	}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || res["uid-1"].Err != nil || len(res["uid-1"].Devices) != 1 || len(res["uid-1"].Devices[0].CDIDeviceIDs) != 2 {
		t.Fatalf("prepare: %+v %v", res, err)
	}
	srv := httptest.NewServer(d.DebugHandler())
	defer srv.Close()
	var migs map[string][]model.MIGInstance
	resp, err := http.Get(srv.URL + "/debug/mig")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&migs)
	resp.Body.Close()
	total := 0
	for _, l := range migs {
		total += len(l)
	}
	if total != 1 {
		t.Errorf("debug/mig shows %d instances, want 1: %v", total, migs)
	}
	un, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "uid-1"}})
	if err != nil || un[types.UID("uid-1")] != nil {
		t.Fatalf("unprepare: %v %v", un, err)
	}

	// Inject a fatal XID on gpu-2 through the debug endpoint: its 8 devices get a NoSchedule taint.
	resp, err = http.Post(srv.URL+"/debug/health?gpu=gpu-2&kind=xid&xid=79", "", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("inject: %v %v", resp, err)
	}
	tainted := func() int {
		devs, _ := publishedDevices(t, kube)
		n := 0
		for _, dv := range devs {
			if len(dv.Taints) > 0 && dv.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule {
				if !strings.HasPrefix(dv.Name, "gpu-2") {
					t.Errorf("device %s tainted", dv.Name)
				}
				n++
			}
		}
		return n
	}
	eventually(t, "taints published", func() bool { return tainted() == 8 })
	rep := d.healthReport()
	unhealthy := 0
	for _, h := range rep.Devices {
		if h.Health == kubeletplugin.HealthStatusUnhealthy {
			unhealthy++
		}
	}
	if unhealthy != 8 || len(rep.Devices) != 64 {
		t.Errorf("health report: %d unhealthy of %d", unhealthy, len(rep.Devices))
	}
	resp, _ = http.Post(srv.URL+"/debug/health?gpu=gpu-2&kind=recovered", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("recover: %v", resp.Status)
	}
	eventually(t, "taints cleared", func() bool { return tainted() == 0 })
	if bad, _ := http.Post(srv.URL+"/debug/health?gpu=gpu-2&kind=boom", "", nil); bad.StatusCode != http.StatusBadRequest {
		t.Errorf("bad kind accepted: %v", bad.Status)
	}
}

func TestUnknownMIGProfileWarns(t *testing.T) {
	tests := []struct {
		name     string
		profiles []string
		want     string // "" when no warning is expected
	}{
		{"known profiles", []string{"1g.10gb", "3g.40gb"}, ""},
		{"typo", []string{"1g.10gb", "1g.11gb"}, "--mig-profiles: 1g.11gb offered by no GPU of this node"},
		{"A100 profile on H100s", []string{"1g.5gb", "2g.10gb"}, "--mig-profiles: 1g.5gb,2g.10gb offered by no GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var warnings []string
			startDriverWith(t, slices.Options{Profiles: tt.profiles}, func(typ, reason, msg string) {
				if reason == "UnknownMIGProfile" {
					warnings = append(warnings, typ+" "+msg)
				}
			})
			switch {
			case tt.want == "" && len(warnings) > 0:
				t.Fatalf("unexpected warnings %q", warnings)
			case tt.want != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], "Warning "+tt.want)):
				t.Fatalf("warnings %q, want one containing %q", warnings, tt.want)
			}
		})
	}
}
