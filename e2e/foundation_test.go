package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/images"
)

func TestFoundationResourceAPIServed(t *testing.T) {
	e := requireEnv(t)
	res, err := e.Kube.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1")
	if err != nil {
		t.Fatalf("resource.k8s.io/v1 is not served: %v", err)
	}
	have := map[string]bool{}
	for _, r := range res.APIResources {
		have[r.Name] = true
	}
	for _, want := range []string{"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} {
		if !have[want] {
			t.Errorf("resource.k8s.io/v1 does not serve %s (serves %v)", want, have)
		}
	}
}

func TestFoundationNodeReady(t *testing.T) {
	e := requireEnv(t)
	n, err := e.Kube.CoreV1().Nodes().Get(context.Background(), e.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.NodeInfo.KubeletVersion; got != cluster.KubernetesVersion {
		t.Errorf("kubelet version = %q, want %q", got, cluster.KubernetesVersion)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("node %s is not Ready: %+v", e.NodeName, n.Status.Conditions)
	}
	v, err := e.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != cluster.KubernetesVersion {
		t.Errorf("apiserver version = %q, want %q", v.GitVersion, cluster.KubernetesVersion)
	}
}

func TestFoundationSmokePodLogs(t *testing.T) {
	e := requireEnv(t)
	img := e.Image(t, "smoke", "./e2e/cmd/smoke")
	ns := e.Namespace(t, "smoke")
	e.Apply(t, ns, images.SmokePod(e.NodeName, img, "hello-from-the-local-cluster"))
	e.WaitPodRunning(t, ns, "smoke", 90*time.Second)
	Eventually(t, 20*time.Second, "smoke pod logs", func() (bool, error) {
		out, err := e.KubectlErr("-n", ns, "logs", "smoke")
		if err != nil {
			return false, err
		}
		return strings.Contains(out, "neuronetes smoke pod running") && strings.Contains(out, "SMOKE_GREETING=hello-from-the-local-cluster"), fmt.Errorf("logs: %q", out)
	})
}

// smokeDRAPlugin is a minimal DRA driver used to prove the kubelet's DRA
// path: it records NodePrepareResources calls and writes a CDI spec that
// injects an environment variable.
type smokeDRAPlugin struct {
	driver string
	cdiDir string

	mu       sync.Mutex
	prepared map[types.UID]time.Time
}

func (p *smokeDRAPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var devs []kubeletplugin.Device
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != p.driver {
				continue
			}
			cdiName := fmt.Sprintf("%s=%s", p.cdiKind(), r.Device)
			if err := p.writeCDISpec(r.Device); err != nil {
				out[c.UID] = kubeletplugin.PrepareResult{Err: err}
				continue
			}
			devs = append(devs, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{cdiName}})
		}
		p.mu.Lock()
		p.prepared[c.UID] = time.Now()
		p.mu.Unlock()
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	return out, nil
}

func (p *smokeDRAPlugin) cdiKind() string { return p.driver + "/device" }

func (p *smokeDRAPlugin) writeCDISpec(device string) error {
	spec := map[string]any{
		"cdiVersion": "0.6.0",
		"kind":       p.cdiKind(),
		"devices": []any{map[string]any{
			"name":           device,
			"containerEdits": map[string]any{"env": []string{"SMOKE_DRA_DEVICE=" + device}},
		}},
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.cdiDir, "e2e-smoke-"+device+".json"), b, 0o644)
}

func (p *smokeDRAPlugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (p *smokeDRAPlugin) HandleError(ctx context.Context, err error, msg string) {}

func (p *smokeDRAPlugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (p *smokeDRAPlugin) preparedAt(uid types.UID) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts, ok := p.prepared[uid]
	return ts, ok
}

func TestFoundationDRAClaimPreparedByKubelet(t *testing.T) {
	e := requireEnv(t)
	img := e.Image(t, "smoke", "./e2e/cmd/smoke")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const driver = "smoke.e2e.neuronetes.io"
	plugin := &smokeDRAPlugin{driver: driver, cdiDir: "/var/run/cdi", prepared: map[types.UID]time.Time{}}
	dataDir := filepath.Join(cluster.KubeletRootDir, "plugins", driver)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	helper, err := kubeletplugin.Start(ctx, plugin,
		kubeletplugin.DriverName(driver), kubeletplugin.KubeClient(e.Kube), kubeletplugin.NodeName(e.NodeName),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(cluster.KubeletRootDir, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(dataDir))
	if err != nil {
		t.Fatalf("starting the smoke DRA plugin: %v", err)
	}
	t.Cleanup(func() {
		helper.Stop()
		_ = os.RemoveAll(dataDir)
		matches, _ := filepath.Glob("/var/run/cdi/e2e-smoke-*.json")
		for _, m := range matches {
			_ = os.Remove(m)
		}
	})
	devices := []resourceapi.Device{}
	for i := 0; i < 2; i++ {
		devices = append(devices, resourceapi.Device{
			Name:       fmt.Sprintf("smoke-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr(fmt.Sprintf("model-%d", i))}},
		})
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		e.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}); err != nil {
		t.Fatalf("publishing: %v", err)
	}
	Eventually(t, 30*time.Second, "the smoke ResourceSlice", func() (bool, error) {
		l, err := e.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == 2, nil
	})
	ns := e.Namespace(t, "smoke-dra")
	e.Apply(t, "", fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: %s
spec:
  selectors:
  - cel:
      expression: device.driver == %q
`, driver, driver))
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: want-model-1
spec:
  devices:
    requests:
    - name: dev
      exactly:
        deviceClassName: %s
        selectors:
        - cel:
            expression: device.attributes[%q].model == "model-1"
---
apiVersion: v1
kind: Pod
metadata:
  name: dra-smoke
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - name: dev
    resourceClaimName: want-model-1
  containers:
  - name: smoke
    image: %s
    imagePullPolicy: Never
    resources:
      claims:
      - name: dev
`, driver, driver, img))
	pod := e.WaitPodRunning(t, ns, "dra-smoke", 90*time.Second)
	claim, err := e.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, "want-model-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim not allocated: %+v", claim.Status)
	}
	if got := claim.Status.Allocation.Devices.Results[0].Device; got != "smoke-1" {
		t.Errorf("the CEL selector chose %s, want smoke-1", got)
	}
	preparedAt, ok := plugin.preparedAt(claim.UID)
	if !ok {
		t.Fatal("the kubelet never called NodePrepareResources for the claim")
	}
	started := pod.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	// StartedAt has second granularity; prepare must not come after it.
	if preparedAt.Truncate(time.Second).After(started) {
		t.Errorf("NodePrepareResources at %s came after the container started at %s", preparedAt, started)
	}
	Eventually(t, 20*time.Second, "the CDI env var in the container", func() (bool, error) {
		out, err := e.KubectlErr("-n", ns, "logs", "dra-smoke")
		return strings.Contains(out, "SMOKE_DRA_DEVICE=smoke-1"), err
	})
}

func TestFoundationKwokNodeRunsPod(t *testing.T) {
	e := requireEnv(t)
	if _, err := e.Kube.CoreV1().Nodes().Get(context.Background(), cluster.KwokNodeName(0), metav1.GetOptions{}); err != nil {
		t.Fatalf("kwok node %s is missing (NEURONETES_E2E_KWOK_NODES=0?): %v", cluster.KwokNodeName(0), err)
	}
	ns := e.Namespace(t, "smoke-kwok")
	node := cluster.KwokNodeName(0)
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: on-kwok
spec:
  nodeSelector:
    kubernetes.io/hostname: %s
  tolerations:
  - key: kwok.x-k8s.io/node
    operator: Exists
    effect: NoSchedule
  containers:
  - name: fake
    image: neuronetes.local/never-pulled:dev
`, node))
	Eventually(t, 60*time.Second, "pod on the kwok node Running", func() (bool, error) {
		p, err := e.Kube.CoreV1().Pods(ns).Get(context.Background(), "on-kwok", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning, fmt.Errorf("node %q phase %s", p.Spec.NodeName, p.Status.Phase)
	})
}

func ptr[T any](v T) *T { return &v }
