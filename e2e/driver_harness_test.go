package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilptr "k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// driverDebug is the driver's debug endpoint (hostNetwork, loopback only, bearer token from the
// Secret neuronetes-driver-debug), see deploy/manifests/driver.yaml.
const driverDebug = "http://127.0.0.1:9411"

// driverHarness deploys the driver DaemonSet and talks to it.
type driverHarness struct {
	e     *Env
	ns    string
	smoke string
	// backend is the NVML backend the deployed driver runs ("" before the first deploy).
	backend string
	// parent is TestDriver's t: the deployment made inside a subtest lives until TestDriver ends.
	parent testing.TB
	// token is the debug endpoint's bearer token, one per harness (made by the first deploy).
	token string
}

// parentCleanup is a testing.TB whose failures are the subtest's and whose cleanups run at the
// end of the parent test.
type parentCleanup struct {
	testing.TB
	parent testing.TB
}

// Cleanup registers f with the parent test.
func (p parentCleanup) Cleanup(f func()) { p.parent.Cleanup(f) }

// use makes a subtest independent of the others and of their order: it (re)deploys the driver
// with backend when another one runs, and removes what a failed subtest may have left (pods and
// claims of the namespace, health taints, the prepare pause), then waits for a clean node: no
// MIG instance and no taint.
func (h *driverHarness) use(t *testing.T, backend string) {
	t.Helper()
	if h.backend != backend {
		h.deploy(parentCleanup{TB: t, parent: h.parent}, backend)
		h.backend = backend
	}
	ctx := context.Background()
	zero := metav1.DeleteOptions{GracePeriodSeconds: utilptr.To[int64](0)}
	_ = h.e.Kube.CoreV1().Pods(h.ns).DeleteCollection(ctx, zero, metav1.ListOptions{LabelSelector: "!app.kubernetes.io/name"})
	_ = h.e.Kube.ResourceV1().ResourceClaims(h.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err := h.debug("POST", "/debug/prepare-pause?duration=0", nil); err != nil {
		t.Fatal(err)
	}
	devs, _, err := h.devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if len(d.Taints) > 0 && !strings.Contains(d.Name, "-mig-") {
			if err := h.debug("POST", "/debug/health?gpu="+d.Name+"&kind=recovered", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	Eventually(t, 2*time.Minute, "a clean node: no claim, MIG instance or taint", func() (bool, error) {
		claims, err := h.e.Kube.ResourceV1().ResourceClaims(h.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n, err := h.migInstances()
		if err != nil {
			return false, err
		}
		devs, _, err := h.devices()
		tainted := 0
		for _, d := range devs {
			tainted += len(d.Taints)
		}
		return err == nil && len(claims.Items) == 0 && n == 0 && tainted == 0,
			fmt.Errorf("%d claims, %d MIG instances, %d taints, err %v", len(claims.Items), n, tainted, err)
	})
}

// deploy applies deploy/manifests/driver.yaml into the test namespace with the given NVML backend
// and waits until the driver publishes devices of that backend.
func (h *driverHarness) deploy(t testing.TB, backend string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(h.e.Root, "deploy", "manifests", "driver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := strings.ReplaceAll(string(raw), "namespace: neuronetes-system", "namespace: "+h.ns)
	m = strings.Replace(m, "value: mock:dgxh100", "value: "+backend, 1)
	if h.token == "" {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		h.token = hex.EncodeToString(b)
	}
	// The Secret goes first: the driver pod mounts it.
	m = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: neuronetes-driver-debug\n  namespace: " + h.ns +
		"\nstringData:\n  token: " + h.token + "\n---\n" + m
	h.e.Apply(t, h.ns, m)
	want := h.expected(t, backend)
	Eventually(t, 3*time.Minute, "driver slices for "+backend, func() (bool, error) {
		devs, _, err := h.devices()
		if err != nil {
			return false, err
		}
		got := map[string]string{}
		for _, d := range devs {
			got[d.Name] = attr(d, slices.AttrUUID) + attr(d, slices.AttrNVLinkDomain)
		}
		for name, v := range want {
			if got[name] != v {
				return false, fmt.Errorf("device %s: published %q, want %q (%d devices)", name, got[name], v, len(devs))
			}
		}
		return len(got) == len(want), fmt.Errorf("%d devices published, want %d", len(got), len(want))
	})
}

// expected returns, per device name, the uuid+nvlinkDomain the driver must publish for backend on
// this node (computed with the driver's own packages from the same mock).
func (h *driverHarness) expected(t testing.TB, backend string) map[string]string {
	b, err := nvml.Open(backend, nvml.Options{Seed: h.e.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := nvml.Inventory(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range slices.Build(h.e.NodeName, gpus, slices.Options{}).Pools[h.e.NodeName].Slices {
		for _, d := range s.Devices {
			out[d.Name] = attr(d, slices.AttrUUID) + attr(d, slices.AttrNVLinkDomain)
		}
	}
	return out
}

func attr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// devices lists the devices and counter sets the driver published for the node.
func (h *driverHarness) devices() ([]resourceapi.Device, []resourceapi.ResourceSlice, error) {
	list, err := h.e.Kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: "spec.driver=" + model.DriverName + ",spec.nodeName=" + h.e.NodeName,
	})
	if err != nil {
		return nil, nil, err
	}
	var devs []resourceapi.Device
	for _, s := range list.Items {
		devs = append(devs, s.Spec.Devices...)
	}
	return devs, list.Items, nil
}

func (h *driverHarness) debug(method, path string, out any) error {
	req, err := http.NewRequest(method, driverDebug+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, body)
	}
	if out != nil {
		return json.Unmarshal(body, out)
	}
	return nil
}

// migInstances returns the MIG instances existing on the (mock) hardware.
func (h *driverHarness) migInstances() (int, error) {
	var m map[string][]model.MIGInstance
	if err := h.debug("GET", "/debug/mig", &m); err != nil {
		return 0, err
	}
	n := 0
	for _, l := range m {
		n += len(l)
	}
	return n, nil
}

// claimPod creates a ResourceClaim and a smoke pod using it, both named name.
func (h *driverHarness) claimPod(t *testing.T, name, requests string) {
	t.Helper()
	h.e.Apply(t, h.ns, fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: %[1]s
spec:
  devices:
%[2]s
---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  nodeSelector:
    kubernetes.io/hostname: %[4]s
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - name: gpus
    resourceClaimName: %[1]s
  containers:
  - name: smoke
    image: %[3]s
    imagePullPolicy: Never
    resources:
      claims:
      - name: gpus
`, name, requests, h.smoke, h.e.NodeName))
}

// deletePod deletes a pod and its claim and waits until both are gone.
func (h *driverHarness) deletePod(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	_ = h.e.Kube.CoreV1().Pods(h.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: utilptr.To[int64](0)})
	Eventually(t, 90*time.Second, "pod "+name+" gone", func() (bool, error) {
		_, err := h.e.Kube.CoreV1().Pods(h.ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, fmt.Errorf("pod still exists")
	})
	_ = h.e.Kube.ResourceV1().ResourceClaims(h.ns).Delete(ctx, name, metav1.DeleteOptions{})
	Eventually(t, 60*time.Second, "claim "+name+" gone", func() (bool, error) {
		_, err := h.e.Kube.ResourceV1().ResourceClaims(h.ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, fmt.Errorf("claim still exists")
	})
}

// allocated returns the device names allocated to a claim.
func (h *driverHarness) allocated(t *testing.T, claim string) []string {
	t.Helper()
	c, err := h.e.Kube.ResourceV1().ResourceClaims(h.ns).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation == nil {
		t.Fatalf("claim %s not allocated", claim)
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Device)
	}
	sort.Strings(out)
	return out
}

func (h *driverHarness) waitLogs(t *testing.T, pod, want string) string {
	t.Helper()
	var logs string
	Eventually(t, 30*time.Second, "logs of "+pod+" containing "+want, func() (bool, error) {
		out, err := h.e.KubectlErr("-n", h.ns, "logs", pod)
		logs = out
		return err == nil && strings.Contains(out, want), fmt.Errorf("logs: %q err %v", out, err)
	})
	return logs
}

func (h *driverHarness) uuidOf(t *testing.T, device string) string {
	t.Helper()
	devs, _, err := h.devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Name == device {
			return attr(d, slices.AttrUUID)
		}
	}
	t.Fatalf("device %s not published", device)
	return ""
}

// driverRestarts returns the restart count of the driver container on the node.
func (h *driverHarness) driverRestarts(t *testing.T) int32 {
	t.Helper()
	pods, err := h.e.Kube.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=neuronetes-driver"})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			n += cs.RestartCount
		}
	}
	return n
}
