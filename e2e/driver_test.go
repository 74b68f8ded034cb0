package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	h := &driverHarness{e: e, ns: e.NamespaceWithPodSecurity(t, "driver", "privileged",
		"deploy/manifests/driver.yaml is a privileged DaemonSet on the host network with kubelet hostPaths"), smoke: e.Image(t, "smoke", "./e2e/cmd/smoke"), parent: t}
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

	t.Run("g_FirstAvailableSubrequestGetsItsRequestConfig", func(t *testing.T) {
		h.use(t, "mock:dgxh100")
		// The scheduler allocates the first alternative that fits, and the allocation result names
		// the subrequest ("gpu/mig"); the config names the request ("gpu") and must reach it. (No
		// interval: a time slice applies to whole GPUs and is refused on a MIG device.)
		h.claimPod(t, "firstavail", `    requests:
    - name: gpu
      firstAvailable:
      - name: mig
        deviceClassName: mig-1g.10gb.neuronetes.io
      - name: whole
        deviceClassName: gpu.neuronetes.io
    config:
    - requests: ["gpu"]
      opaque:
        driver: gpu.neuronetes.io
        parameters:
          apiVersion: gpu.neuronetes.io/v1alpha1
          kind: GpuConfig
          sharing: {strategy: TimeSlicing}`)
		defer h.deletePod(t, "firstavail")
		e.WaitPodRunning(t, h.ns, "firstavail", 2*time.Minute)
		c, err := e.Kube.ResourceV1().ResourceClaims(h.ns).Get(ctx, "firstavail", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := c.Status.Allocation.Devices.Results; len(r) != 1 || r[0].Request != "gpu/mig" || !strings.Contains(r[0].Device, "-mig-1g-10gb-") {
			t.Fatalf("allocation %+v, want one 1g.10gb device for subrequest gpu/mig", r)
		}
		h.waitLogs(t, "firstavail", "NEURONETES_GPU_SHARING=TimeSlicing")
	})

	t.Run("AttackDriverDebugWithoutToken", func(t *testing.T) { testAttackDriverDebugWithoutToken(t, h) })
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
