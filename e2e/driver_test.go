package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilptr "k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/slices"
	"github.com/neuronetes/neuronetes/e2e/images"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

// driverDebug is the driver's debug endpoint (hostNetwork, loopback only), see deploy/manifests/driver.yaml.
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

// TestDriver deploys the driver against the dgxh100 mock (and the nvlink-pairs mock for (d)) on
// the real node and runs the acceptance scenarios (a)-(f) as subtests. Each subtest starts with
// h.use, which deploys the backend it needs and cleans up after a failed one, so any subtest runs
// alone (-run TestDriver/d_) and in any order.
func TestDriver(t *testing.T) {
	e := requireEnv(t)
	ctx := context.Background()
	// The driver's plugin directory, checkpoint and slices are per node: a second deployment (e.g.
	// the chart of make run) would fight over them, this test's cleanup removes that state, and its
	// claims hold devices the subtests count on. Wait a while for it to go (an earlier test's
	// uninstall), then skip.
	deadline := time.Now().Add(90 * time.Second)
	for other := otherDriver(ctx, e, ""); other != ""; other = otherDriver(ctx, e, "") {
		if time.Now().After(deadline) {
			testreq.Tool(t, "the node to itself", "another %s driver runs on node %s (%s)", model.DriverName, e.NodeName, other)
		}
		time.Sleep(2 * time.Second)
	}
	e.Image(t, "driver", "./cmd/driver", images.WithCgo())
	h := &driverHarness{e: e, ns: e.Namespace(t, "driver"), smoke: e.Image(t, "smoke", "./e2e/cmd/smoke"), parent: t}
	// Runs after the DaemonSet is deleted (cleanups run last-in first-out): wait for the driver
	// pods to go, then remove what outlives them: the slices (owned by the Node) and the plugin's
	// state on the host.
	t.Cleanup(func() {
		bg := context.Background()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			pods, err := e.Kube.CoreV1().Pods(h.ns).List(bg, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=neuronetes-driver"})
			if err == nil && len(pods.Items) == 0 {
				break
			}
			time.Sleep(time.Second)
		}
		_ = e.Kube.ResourceV1().ResourceSlices().DeleteCollection(bg, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + model.DriverName + ",spec.nodeName=" + e.NodeName})
		dir := "/var/lib/kubelet/plugins/" + model.DriverName
		for _, f := range []string{"checkpoint.json", "checkpoint.json.intent", "checkpoint.json.corrupt", "mock-nvml-state.json"} {
			_ = os.Remove(filepath.Join(dir, f))
		}
	})
	// DeviceClasses are cluster-wide and other tests (scale) may use them too: apply all of them
	// (updating older versions in place) but delete at cleanup only those this test created.
	var created []string
	for _, f := range []string{"gpu.yaml", "mig.yaml", "mig-profiles.yaml"} {
		path := filepath.Join(e.Root, "deploy", "deviceclasses", f)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			if _, rest, ok := strings.Cut(doc, "\n  name: "); ok {
				name, _, _ := strings.Cut(rest, "\n")
				if _, err := e.Kube.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{}); err != nil {
					created = append(created, name)
				}
			}
		}
		e.Kubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=neuronetes-e2e-driver", "-f", path)
	}
	t.Cleanup(func() {
		for _, name := range created {
			_ = e.Kube.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})

	t.Run("a_SlicesAcceptedByAPIServer", func(t *testing.T) {
		h.use(t, "mock:dgxh100")
		devs, published, err := h.devices()
		if err != nil {
			t.Fatal(err)
		}
		sets := 0
		for _, s := range published {
			sets += len(s.Spec.SharedCounters)
		}
		if len(devs) != 8*29 || sets != 8 {
			t.Errorf("published %d devices and %d counter sets, want 232 and 8", len(devs), sets)
		}
		// Every layout the driver can produce, for every mock profile, passes the apiserver's
		// validation (server-side dry run of the exact slices Build returns).
		for _, prof := range nvml.MockProfiles() {
			for _, opts := range []slices.Options{{}, {MIG: slices.MIGNone}, {Profiles: []string{"1g.10gb", "3g.40gb"}}} {
				b, err := nvml.Open("mock:"+prof, nvml.Options{})
				if err != nil {
					t.Fatal(err)
				}
				gpus, _ := nvml.Inventory(ctx, b)
				pool := slices.Build(e.NodeName, gpus, opts).Pools[e.NodeName]
				for i, s := range pool.Slices {
					rs := &resourceapi.ResourceSlice{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dryrun-%s-%d", prof, i)},
						Spec: resourceapi.ResourceSliceSpec{
							Driver:         model.DriverName,
							Pool:           resourceapi.ResourcePool{Name: e.NodeName, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
							NodeName:       utilptr.To(e.NodeName),
							Devices:        s.Devices,
							SharedCounters: s.SharedCounters,
						},
					}
					got, err := e.Kube.ResourceV1().ResourceSlices().Create(ctx, rs, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					if err != nil {
						t.Errorf("%s %+v slice %d rejected: %v", prof, opts, i, err)
						continue
					}
					if len(got.Spec.Devices) != len(s.Devices) || len(got.Spec.SharedCounters) != len(s.SharedCounters) {
						t.Errorf("%s slice %d: apiserver dropped fields (%d/%d devices)", prof, i, len(got.Spec.Devices), len(s.Devices))
					}
				}
			}
		}
	})

	t.Run("b_WholeGPUPodGetsUUIDThroughCDI", func(t *testing.T) {
		h.use(t, "mock:dgxh100")
		h.claimPod(t, "whole", `    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.neuronetes.io`)
		defer h.deletePod(t, "whole")
		e.WaitPodRunning(t, h.ns, "whole", 2*time.Minute)
		devs := h.allocated(t, "whole")
		if len(devs) != 1 || strings.Contains(devs[0], "mig") {
			t.Fatalf("allocated %v, want one whole GPU", devs)
		}
		uuid := h.uuidOf(t, devs[0])
		h.waitLogs(t, "whole", "NVIDIA_VISIBLE_DEVICES="+uuid)
	})

	t.Run("b2_ExtendedResourceRequestThroughDRA", func(t *testing.T) {
		h.use(t, "mock:dgxh100")
		e.Apply(t, h.ns, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: extended
spec:
  nodeSelector:
    kubernetes.io/hostname: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: smoke
    image: %s
    imagePullPolicy: Never
    resources:
      limits:
        nvidia.com/gpu: "1"
`, e.NodeName, h.smoke))
		e.WaitPodRunning(t, h.ns, "extended", 2*time.Minute)
		h.waitLogs(t, "extended", "NVIDIA_VISIBLE_DEVICES=GPU-")
		_ = e.Kube.CoreV1().Pods(h.ns).Delete(ctx, "extended", metav1.DeleteOptions{GracePeriodSeconds: utilptr.To[int64](0)})
		Eventually(t, 90*time.Second, "extended-resource pod and its claim gone", func() (bool, error) {
			_, err := e.Kube.CoreV1().Pods(h.ns).Get(ctx, "extended", metav1.GetOptions{})
			claims, lerr := e.Kube.ResourceV1().ResourceClaims(h.ns).List(ctx, metav1.ListOptions{})
			return err != nil && lerr == nil && len(claims.Items) == 0, fmt.Errorf("pod err %v, claims %v", err, claims)
		})
	})

	t.Run("c_MIGCreatedAtPrepareDestroyedAtDelete", func(t *testing.T) {
		h.use(t, "mock:dgxh100")
		if n, err := h.migInstances(); err != nil || n != 0 {
			t.Fatalf("MIG instances before: %d %v", n, err)
		}
		h.claimPod(t, "mig", `    requests:
    - name: gpu
      exactly:
        deviceClassName: mig-1g.10gb.neuronetes.io`)
		e.WaitPodRunning(t, h.ns, "mig", 2*time.Minute)
		devs := h.allocated(t, "mig")
		if len(devs) != 1 || !strings.Contains(devs[0], "-mig-1g-10gb-p") {
			t.Fatalf("allocated %v, want one 1g.10gb device", devs)
		}
		if n, err := h.migInstances(); err != nil || n != 1 {
			t.Fatalf("MIG instances while running: %d %v, want 1", n, err)
		}
		h.waitLogs(t, "mig", "NVIDIA_VISIBLE_DEVICES=MIG-")
		h.deletePod(t, "mig")
		Eventually(t, 60*time.Second, "MIG instance destroyed", func() (bool, error) {
			n, err := h.migInstances()
			return err == nil && n == 0, fmt.Errorf("%d instances, err %v", n, err)
		})
	})

	t.Run("e_XIDTaintsDeviceNewClaimAvoidsItRecoveryClears", func(t *testing.T) {
		h.use(t, "mock:dgxh100")
		if err := h.debug("POST", "/debug/health?gpu=gpu-0&kind=xid&xid=79", nil); err != nil {
			t.Fatal(err)
		}
		taintedGPU0 := func() (int, error) {
			devs, _, err := h.devices()
			n := 0
			for _, d := range devs {
				for _, tn := range d.Taints {
					if tn.Effect == resourceapi.DeviceTaintEffectNoSchedule {
						if !strings.HasPrefix(d.Name, "gpu-0") || strings.HasPrefix(d.Name, "gpu-0") && len(d.Name) > 5 && d.Name[5] != '-' {
							return 0, fmt.Errorf("device %s tainted", d.Name)
						}
						n++
					}
				}
			}
			return n, err
		}
		Eventually(t, 60*time.Second, "gpu-0 tainted", func() (bool, error) {
			n, err := taintedGPU0()
			return err == nil && n == 29, fmt.Errorf("%d tainted devices, err %v", n, err)
		})
		// Let the scheduler's informers catch up with the slice update (the API server has it).
		time.Sleep(3 * time.Second)
		// Seven whole GPUs fit only if the tainted one is avoided.
		h.claimPod(t, "avoid", `    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.neuronetes.io
        allocationMode: ExactCount
        count: 7`)
		e.WaitPodRunning(t, h.ns, "avoid", 2*time.Minute)
		for _, d := range h.allocated(t, "avoid") {
			if d == "gpu-0" {
				devs, _, _ := h.devices()
				for _, dv := range devs {
					if dv.Name == "gpu-0" {
						t.Logf("gpu-0 taints now: %+v", dv.Taints)
					}
				}
				t.Logf("claim: %s", e.Kubectl(t, "-n", h.ns, "get", "resourceclaim", "avoid", "-o", "yaml"))
				t.Errorf("claim got the tainted gpu-0")
			}
		}
		h.deletePod(t, "avoid")
		if err := h.debug("POST", "/debug/health?gpu=gpu-0&kind=recovered", nil); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 60*time.Second, "taint cleared", func() (bool, error) {
			n, err := taintedGPU0()
			return err == nil && n == 0, fmt.Errorf("%d tainted devices, err %v", n, err)
		})
	})

	t.Run("f_SIGKILLMidPrepareCompletesWithoutLeak", func(t *testing.T) {
		h.use(t, "mock:dgxh100")
		if err := h.debug("POST", "/debug/prepare-pause?duration=5m", nil); err != nil {
			t.Fatal(err)
		}
		var pid struct{ PID int }
		if err := h.debug("GET", "/debug/pid", &pid); err != nil || pid.PID <= 1 {
			t.Fatalf("pid: %+v %v", pid, err)
		}
		for _, name := range []string{"crash-a", "crash-b"} {
			h.claimPod(t, name, `    requests:
    - name: gpu
      exactly:
        deviceClassName: mig-1g.10gb.neuronetes.io
        allocationMode: ExactCount
        count: 2`)
		}
		cp := "/var/lib/kubelet/plugins/" + model.DriverName + "/checkpoint.json"
		Eventually(t, 2*time.Minute, "a prepare paused after creating a MIG instance", func() (bool, error) {
			st := &checkpoint.Store{Path: cp}
			d, _, err := st.Load()
			if err != nil {
				return false, err
			}
			started := 0
			for _, c := range d.Claims {
				if c.State == checkpoint.PrepareStarted {
					started++
				}
			}
			n, err := h.migInstances()
			return started == 1 && n >= 1, fmt.Errorf("%d PrepareStarted claims, %d MIG instances, err %v", started, n, err)
		})
		restarts := h.driverRestarts(t)
		if err := syscall.Kill(pid.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL %d: %v", pid.PID, err)
		}
		Eventually(t, 2*time.Minute, "driver container restarted", func() (bool, error) {
			n := h.driverRestarts(t)
			return n > restarts, fmt.Errorf("restart count %d, was %d", n, restarts)
		})
		for _, name := range []string{"crash-a", "crash-b"} {
			e.WaitPodRunning(t, h.ns, name, 3*time.Minute)
		}
		// Exactly the instances of the two completed claims exist: 2 x 2.
		if n, err := h.migInstances(); err != nil || n != 4 {
			t.Errorf("MIG instances after recovery: %d %v, want 4", n, err)
		}
		for _, name := range []string{"crash-a", "crash-b"} {
			h.waitLogs(t, name, "NVIDIA_VISIBLE_DEVICES=MIG-")
			h.deletePod(t, name)
		}
		Eventually(t, 60*time.Second, "no MIG instance leaked", func() (bool, error) {
			n, err := h.migInstances()
			return err == nil && n == 0, fmt.Errorf("%d instances, err %v", n, err)
		})
	})

	t.Run("d_NVLinkPairMatchAttribute", func(t *testing.T) {
		h.use(t, "mock:nvlink-pairs")
		// Occupy gpu-1 so that first-fit without the constraint would pick gpu-0 and gpu-2.
		h.claimPod(t, "blocker", `    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.neuronetes.io
        selectors:
        - cel:
            expression: device.attributes["gpu.neuronetes.io"].index == 1`)
		e.WaitPodRunning(t, h.ns, "blocker", 2*time.Minute)
		h.claimPod(t, "pair", `    requests:
    - name: gpus
      exactly:
        deviceClassName: gpu.neuronetes.io
        allocationMode: ExactCount
        count: 2
    constraints:
    - requests: ["gpus"]
      matchAttribute: gpu.neuronetes.io/nvlinkDomain`)
		e.WaitPodRunning(t, h.ns, "pair", 2*time.Minute)
		devs := h.allocated(t, "pair")
		var a, b int
		if len(devs) != 2 {
			t.Fatalf("allocated %v", devs)
		}
		fmt.Sscanf(devs[0], "gpu-%d", &a)
		fmt.Sscanf(devs[1], "gpu-%d", &b)
		if a/2 != b/2 || a == b || a == 1 || b == 1 {
			t.Errorf("allocated %v, want one NVLink pair (gpu-2k, gpu-2k+1) other than gpu-0/gpu-1", devs)
		}
		h.waitLogs(t, "pair", h.uuidOf(t, devs[0]))
		h.waitLogs(t, "pair", h.uuidOf(t, devs[1]))
		h.deletePod(t, "pair")
		h.deletePod(t, "blocker")
	})
}
