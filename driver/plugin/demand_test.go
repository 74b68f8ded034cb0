package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/driver/model"
)

func migClasses(t *testing.T, names ...string) []runtime.Object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "deviceclasses", "mig-profiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var dc resourceapi.DeviceClass
		if err := yaml.Unmarshal([]byte(doc), &dc); err != nil || dc.Name == "" {
			continue
		}
		for _, n := range names {
			if dc.Name == n {
				out = append(out, &dc)
			}
		}
	}
	if len(out) != len(names) {
		t.Fatalf("found %d of the classes %v", len(out), names)
	}
	return out
}

func migRequest(class string) resourceapi.DeviceClaim {
	return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "g", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}}
}

// TestDemandShapedLayout: with Demand, a node publishes MIG devices only for the profiles the
// cluster's claims and templates request, follows changes, and keeps publishing a profile a
// prepared claim holds.
func TestDemandShapedLayout(t *testing.T) {
	objs := append(migClasses(t, "mig-1g.10gb.neuronetes.io", "mig-3g.40gb.neuronetes.io"),
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "small"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: migRequest("mig-1g.10gb.neuronetes.io")}}})
	d, kube := startDriverOpts(t, t.TempDir(), newKube(objs...), func(o *Options) {
		o.Demand = &DemandOptions{Debounce: 10 * time.Millisecond}
	})
	count := func() int { devs, _ := publishedDevices(t, kube); return len(devs) }
	// 8 GPUs x (whole + 7 placements of 1g.10gb).
	eventually(t, "1g.10gb published", func() bool { return count() == 64 })
	ctx := context.Background()
	big := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "big"}, Spec: resourceapi.ResourceClaimSpec{Devices: migRequest("mig-3g.40gb.neuronetes.io")}}
	if _, err := kube.ResourceV1().ResourceClaims("a").Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "3g.40gb added", func() bool { return count() == 80 })
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "a", UID: "uid-held"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "g", Driver: model.DriverName, Pool: "node-a", Device: "gpu-1-mig-1g-10gb-p3"}}
	if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil || res["uid-held"].Err != nil {
		t.Fatalf("prepare: %+v %v", res, err)
	}
	if err := kube.ResourceV1().ResourceClaimTemplates("a").Delete(ctx, "small", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// 1g.10gb is no longer requested, but the prepared claim holds one: still published.
	time.Sleep(300 * time.Millisecond)
	if n := count(); n != 80 {
		t.Errorf("%d devices after the template went, want 80 (1g.10gb held by a claim)", n)
	}
	if err := d.State.Unprepare(ctx, "uid-held"); err != nil {
		t.Fatal(err)
	}
	if err := kube.ResourceV1().ResourceClaims("a").Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// No demand at all: whole GPUs only.
	eventually(t, "whole GPUs only", func() bool { return count() == 8 })
}
