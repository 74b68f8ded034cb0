package demand

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// layout is every device a dgxh100 mock node publishes with all MIG profiles.
func layout(t *testing.T, compat bool) []resourceapi.Device {
	t.Helper()
	b, err := nvml.Open("mock:dgxh100", nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := nvml.Inventory(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.Device
	for _, s := range slices.Build("node-a", gpus, slices.Options{Compat: compat}).Pools["node-a"].Slices {
		out = append(out, s.Devices...)
	}
	return out
}

// deviceClasses reads the driver's DeviceClasses (deploy/deviceclasses and its compat dir).
func deviceClasses(t *testing.T) []*resourceapi.DeviceClass {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "deviceclasses", "*.yaml"))
	compat, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "deviceclasses", "compat", "*.yaml"))
	var out []*resourceapi.DeviceClass
	for _, f := range append(files, compat...) {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(fh, 4096)
		for {
			var dc resourceapi.DeviceClass
			if err := dec.Decode(&dc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if dc.Name != "" {
				out = append(out, &dc)
			}
		}
		fh.Close()
	}
	if len(out) < 30 {
		t.Fatalf("read %d DeviceClasses", len(out))
	}
	return out
}

func selector(expr string) []resourceapi.DeviceSelector {
	return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
}

func TestProfiles(t *testing.T) {
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range deviceClasses(t) {
		classes[c.Name] = c
	}
	all := "1g.10gb,1g.10gb+me,1g.20gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb"
	tests := []struct {
		name    string
		compat  bool
		reqs    []Request
		held    []string
		want    string
		errWant bool
	}{
		{"nothing", false, nil, nil, "", false},
		{"whole GPUs only", false, []Request{{Class: "gpu.neuronetes.io"}}, nil, "", false},
		{"a profile class", false, []Request{{Class: "mig-1g.10gb.neuronetes.io"}}, nil, "1g.10gb", false},
		{"+me profile class", false, []Request{{Class: "mig-1g.10gb-me.neuronetes.io"}}, nil, "1g.10gb+me", false},
		{"any MIG with a selector", false, []Request{{Class: "mig.neuronetes.io", Selectors: selector(`device.attributes["gpu.neuronetes.io"].profile == "3g.40gb"`)}}, nil, "3g.40gb", false},
		{"any MIG", false, []Request{{Class: "mig.neuronetes.io"}}, nil, all, false},
		{"selector on the GPU index", false, []Request{{Class: "mig-1g.20gb.neuronetes.io", Selectors: selector(`device.attributes["gpu.neuronetes.io"].index == 9`)}}, nil, "", false},
		{"class that does not exist", false, []Request{{Class: "mig-9g.99gb.neuronetes.io"}}, nil, "", false},
		{"held profile stays", false, []Request{{Class: "mig-1g.10gb.neuronetes.io"}}, []string{"7g.80gb"}, "1g.10gb,7g.80gb", false},
		{"selector failing at runtime", false, []Request{{Source: "bad", Class: "mig.neuronetes.io", Selectors: selector(`device.attributes["gpu.neuronetes.io"].productName == "x"`)}}, nil, "", true},
		{"NVIDIA's gpu-test4 in compat mode", true, []Request{
			{Class: "mig.nvidia.com", Selectors: selector("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")},
			{Class: "mig.nvidia.com", Selectors: selector("device.attributes['gpu.nvidia.com'].profile == '3g.40gb'")},
		}, nil, "1g.10gb,3g.40gb", false},
		{"compat classes select nothing of the NeuroNetes driver", false, []Request{{Class: "mig.nvidia.com"}}, nil, "", false},
	}
	for _, tc := range tests {
		driver := model.DriverName
		if tc.compat {
			driver = model.CompatDriverName
		}
		got, errs := Profiles(context.Background(), driver, Candidates(layout(t, tc.compat), "type", "profile", "mig"), classes, tc.reqs, tc.held)
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%s: profiles %v, want %s", tc.name, got, tc.want)
		}
		if (len(errs) > 0) != tc.errWant {
			t.Errorf("%s: errors %v, want some=%v", tc.name, errs, tc.errWant)
		}
	}
}

func template(ns, name string, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}}}}
}

func exactly(name, class string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
}

// TestComputeFromObjects: AgentPools (through their AgentClass), claims with firstAvailable
// alternatives and devices allocated on the node all count.
func TestComputeFromObjects(t *testing.T) {
	pool := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "agents", "namespace": "a"},
		"spec": map[string]any{"agentClassRef": map[string]any{"name": "small"}}}}
	class := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "small", "namespace": "a"},
		"spec": map[string]any{"gpu": map[string]any{"migProfile": "1g.10gb+me"}}}}
	orphanClass := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "unused", "namespace": "a"},
		"spec": map[string]any{"gpu": map[string]any{"migProfile": "7g.80gb"}}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "c"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "big", DeviceClassName: "mig-3g.40gb.neuronetes.io"}, {Name: "small", DeviceClassName: "mig-1g.20gb.neuronetes.io"}}}}}}}
	allocated := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "d"}}
	allocated.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "x", Driver: model.DriverName, Pool: "node-a", Device: "gpu-7-mig-2g-20gb-p0"},
		{Request: "y", Driver: model.DriverName, Pool: "node-b", Device: "gpu-7-mig-4g-40gb-p0"},
	}}}
	o := Objects{Classes: deviceClasses(t), Claims: []*resourceapi.ResourceClaim{claim, allocated},
		Templates: []*resourceapi.ResourceClaimTemplate{template("c", "t", exactly("g", "gpu.neuronetes.io"))},
		Pools:     []*unstructured.Unstructured{pool}, AgentClasses: []*unstructured.Unstructured{class, orphanClass}}
	got, errs := Compute(context.Background(), model.DriverName, "node-a", layout(t, false), o)
	if strings.Join(got, ",") != "1g.10gb+me,1g.20gb,2g.20gb,3g.40gb" || len(errs) != 0 {
		t.Errorf("profiles %v errors %v", got, errs)
	}
}

// TestWatcherFollowsChanges: the demand follows templates and claims as they come and go.
func TestWatcherFollowsChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fake.NewSimpleClientset()
	for _, c := range deviceClasses(t) {
		if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kube.ResourceV1().ResourceClaimTemplates("ns").Create(ctx, template("ns", "small", exactly("g", "mig-1g.10gb.neuronetes.io")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	devs := layout(t, false)
	var mu sync.Mutex
	var changes []string
	w := &Watcher{Kube: kube, Driver: model.DriverName, Node: "node-a", Debounce: 10 * time.Millisecond,
		Layout:   func() []resourceapi.Device { return devs },
		OnChange: func(p []string) { mu.Lock(); changes = append(changes, strings.Join(p, ",")); mu.Unlock() }}
	initial, err := w.Start(ctx)
	if got := strings.Join(initial, ","); err != nil || got != "1g.10gb" {
		t.Fatalf("initial demand %q, %v", got, err)
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(changes) == 0 {
			return ""
		}
		return changes[len(changes)-1]
	}
	wait := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for last() != want {
			if time.Now().After(deadline) {
				t.Fatalf("demand changes %v, want last %q", changes, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "big"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{exactly("g", "mig-3g.40gb.neuronetes.io")}}}}
	if _, err := kube.ResourceV1().ResourceClaims("ns").Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("1g.10gb,3g.40gb")
	if err := kube.ResourceV1().ResourceClaimTemplates("ns").Delete(ctx, "small", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("3g.40gb")
}
