package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/e2e/images"
)

// TestDriverCompat installs the driver through the Helm chart in NVIDIA compatibility mode on the
// dgxa100 mock and runs NVIDIA's quickstart specs unchanged (e2e/testdata/nvidia-specs), with the
// assertions NVIDIA's own tests make, then checks that GPU sharing takes effect: the recording
// stand-ins of nvidia-smi and nvidia-cuda-mps-control see exactly the calls real tools would.
func TestDriverCompat(t *testing.T) {
	e := requireEnv(t)
	helm := deployHelm(t, e)
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for other := otherCompatDriver(ctx, e); other != ""; other = otherCompatDriver(ctx, e) {
		if time.Now().After(deadline) {
			t.Skipf("another GPU driver runs on node %s (%s): TestDriverCompat needs the node to itself", e.NodeName, other)
		}
		time.Sleep(2 * time.Second)
	}
	e.Image(t, "driver", "./cmd/driver", images.WithCgo())
	importNVSMIImage(t, e)
	installStandIns(t, e)
	installCompatRelease(t, e, helm)
	Eventually(t, 2*time.Minute, "compat slices of 8 A100s", func() (bool, error) {
		devs := compatDevices(t, e)
		n := 0
		for name := range devs {
			if !strings.Contains(name, "-mig-") {
				n++
			}
		}
		return n == 8, fmt.Errorf("%d whole GPUs published", n)
	})

	t.Run("Quickstart1to4", func(t *testing.T) { compatQuickstart1to4(t, e) })
	t.Run("Quickstart6TimeSlicing", func(t *testing.T) { compatQuickstart6(t, e) })
	t.Run("TimeSlicingSharedClaim", func(t *testing.T) { compatTimeSlicingShared(t, e) })
	t.Run("MPSDaemonPerClaim", func(t *testing.T) { compatMPS(t, e) })
}

// otherCompatDriver names a driver (either name) that runs on the node, or "".
func otherCompatDriver(ctx context.Context, e *Env) string {
	if o := otherDriver(ctx, e, ""); o != "" {
		return o
	}
	l, err := e.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + model.CompatDriverName})
	if err == nil && len(l.Items) > 0 {
		return fmt.Sprintf("%d ResourceSlices of %s", len(l.Items), model.CompatDriverName)
	}
	return ""
}

func applyNVIDIASpec(t *testing.T, e *Env, file string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(e.Root, "e2e", "testdata", "nvidia-specs", "quickstart", "v1", file))
	if err != nil {
		t.Fatal(err)
	}
	e.Apply(t, "", string(raw))
}

// podsOf returns the names of the pods of a namespace with a label selector, once n are running.
func runningPods(t *testing.T, e *Env, ns, selector string, n int) []string {
	t.Helper()
	var names []string
	Eventually(t, 4*time.Minute, fmt.Sprintf("%d running pods %s in %s", n, selector, ns), func() (bool, error) {
		pods, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		names = names[:0]
		var why []string
		for _, p := range pods.Items {
			ready := p.Status.Phase == "Running"
			for _, cs := range p.Status.ContainerStatuses {
				ready = ready && cs.Ready
			}
			if ready {
				names = append(names, p.Name)
			} else {
				why = append(why, p.Name+": "+string(p.Status.Phase)+" "+podWaitingReason(&p))
			}
		}
		return len(names) == n, fmt.Errorf("%d running, waiting: %v", len(names), why)
	})
	sort.Strings(names)
	return names
}

// oneGPU checks that the output is exactly one whole GPU line and returns its UUID.
func oneGPU(t *testing.T, where string, lines []string) string {
	t.Helper()
	if len(lines) != 1 {
		t.Errorf("%s: nvidia-smi -L printed %d lines, want 1: %q", where, len(lines), lines)
		return ""
	}
	m := gpuLine.FindStringSubmatch(lines[0])
	if m == nil {
		t.Errorf("%s: %q is not a GPU line", where, lines[0])
		return ""
	}
	return m[1]
}

// compatQuickstart1to4 applies gpu-test1..4 at once, as NVIDIA's quickstart does.
func compatQuickstart1to4(t *testing.T, e *Env) {
	for _, f := range []string{"gpu-test1.yaml", "gpu-test2.yaml", "gpu-test3.yaml", "gpu-test4.yaml"} {
		applyNVIDIASpec(t, e, f)
	}
	defer deleteNamespaces(t, e, "gpu-test1", "gpu-test2", "gpu-test3", "gpu-test4")
	// gpu-test1: two pods, one distinct GPU each.
	runningPods(t, e, "gpu-test1", "app=pod", 2)
	a := oneGPU(t, "gpu-test1/pod1", smiLines(t, e, "gpu-test1", "pod1", "ctr", 1))
	b := oneGPU(t, "gpu-test1/pod2", smiLines(t, e, "gpu-test1", "pod2", "ctr", 1))
	if a == "" || a == b {
		t.Errorf("gpu-test1: pods see %q and %q, want two distinct GPUs", a, b)
	}
	// gpu-test2: one pod, two containers sharing one GPU.
	runningPods(t, e, "gpu-test2", "app=pod", 1)
	c0 := oneGPU(t, "gpu-test2/ctr0", smiLines(t, e, "gpu-test2", "pod", "ctr0", 1))
	c1 := oneGPU(t, "gpu-test2/ctr1", smiLines(t, e, "gpu-test2", "pod", "ctr1", 1))
	if c0 == "" || c0 != c1 {
		t.Errorf("gpu-test2: containers see %q and %q, want the same GPU", c0, c1)
	}
	// gpu-test3: two pods sharing one global claim.
	runningPods(t, e, "gpu-test3", "app=pod", 2)
	p1 := oneGPU(t, "gpu-test3/pod1", smiLines(t, e, "gpu-test3", "pod1", "ctr", 1))
	p2 := oneGPU(t, "gpu-test3/pod2", smiLines(t, e, "gpu-test3", "pod2", "ctr", 1))
	if p1 == "" || p1 != p2 {
		t.Errorf("gpu-test3: pods see %q and %q, want the same GPU", p1, p2)
	}
	if seen := map[string]bool{a: true, b: true, c0: true, p1: true}; len(seen) != 4 {
		t.Errorf("gpu-test1..3 GPUs %v are not 4 distinct GPUs", seen)
	}
	// gpu-test4: 4 replicas, each with 4 MIG devices (1g.5gb x2, 2g.10gb, 3g.20gb) on one parent.
	parents := map[string]string{}
	for _, pod := range runningPods(t, e, "gpu-test4", "app=pod", 4) {
		parent := ""
		migs := map[string]bool{}
		for i, want := range []string{"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"} {
			ctr := fmt.Sprintf("ctr%d", i)
			lines := smiLines(t, e, "gpu-test4", pod, ctr, 2)
			if len(lines) != 2 {
				t.Errorf("gpu-test4 %s/%s: %q, want a GPU line and a MIG line", pod, ctr, lines)
				continue
			}
			g, m := gpuLine.FindStringSubmatch(lines[0]), migLine.FindStringSubmatch(lines[1])
			if g == nil || m == nil || m[1] != want {
				t.Errorf("gpu-test4 %s/%s: %q, want a GPU line and a MIG %s line", pod, ctr, lines, want)
				continue
			}
			if parent != "" && g[1] != parent {
				t.Errorf("gpu-test4 %s: MIG devices on parents %s and %s, want one (matchAttribute parentUUID)", pod, parent, g[1])
			}
			parent = g[1]
			migs[m[2]] = true
		}
		if len(migs) != 4 {
			t.Errorf("gpu-test4 %s: %d distinct MIG devices, want 4", pod, len(migs))
		}
		if other, dup := parents[parent]; dup {
			t.Errorf("gpu-test4: pods %s and %s share parent %s", other, pod, parent)
		}
		parents[parent] = pod
	}
	t.Logf("[e2e] gpu-test1..4: whole GPUs %s %s %s %s; MIG parents %v", a, b, c0, p1, parents)
}

// compatQuickstart6 applies gpu-test6: 4 replicas, each a GPU of index 0, 2, 4 or 6 with
// TimeSlicing Long, which the driver applies through nvidia-smi once per GPU and restores at the
// end.
func compatQuickstart6(t *testing.T, e *Env) {
	byUUID := map[string]string{}
	for _, v := range compatDevices(t, e) {
		byUUID[v[0]] = v[1]
	}
	before := len(toolCalls(t))
	applyNVIDIASpec(t, e, "gpu-test6.yaml")
	var uuids []string
	for _, pod := range runningPods(t, e, "gpu-test6", "app=pod", 4) {
		u := oneGPU(t, "gpu-test6/"+pod, smiLines(t, e, "gpu-test6", pod, "ctr", 1))
		if idx := byUUID[u]; idx != "0" && idx != "2" && idx != "4" && idx != "6" {
			t.Errorf("gpu-test6 %s: GPU %s has index %q, want 0, 2, 4 or 6", pod, u, idx)
		}
		uuids = append(uuids, u)
	}
	calls := toolCalls(t)[before:]
	for _, u := range uuids {
		if n := countCalls(calls, "nvidia-smi compute-policy -i "+u+" --set-timeslice 3"); n != 1 {
			t.Errorf("gpu-test6: %d time-slice calls (Long = 3) for %s, want 1; calls %v", n, u, callLines(calls))
		}
	}
	if len(calls) != 4 {
		t.Errorf("gpu-test6: %d tool calls, want 4: %v", len(calls), callLines(calls))
	}
	deleteNamespaces(t, e, "gpu-test6")
	Eventually(t, time.Minute, "time slices restored", func() (bool, error) {
		calls := toolCalls(t)[before:]
		n := 0
		for _, u := range uuids {
			n += countCalls(calls, "nvidia-smi compute-policy -i "+u+" --set-timeslice 0")
		}
		return n == 4, fmt.Errorf("%d restores: %v", n, callLines(calls))
	})
}

func callLines(calls []toolCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.line()
	}
	return out
}

// sharedClaimSpec is a claim with an NVIDIA GpuConfig and two pods (containers listing their GPU
// and the MPS pipe directory, if any) that share it.
func sharedClaimSpec(ns, sharing, extra string) string {
	pod := func(name string) string {
		return fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: ctr
    image: ubuntu:24.04
    command: ["bash", "-c"]
    args: ["nvidia-smi -L; %[3]s trap 'exit 0' TERM; sleep 9999 & wait"]
    resources: {claims: [{name: gpu}]}
  resourceClaims: [{name: gpu, resourceClaimName: shared}]
`, name, ns, extra)
	}
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared, namespace: %s}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
    config:
    - requests: ["gpu"]
      opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing:
%s
`, ns, sharing) + pod("pod1") + pod("pod2")
}

// compatTimeSlicingShared: two pods sharing one TimeSlicing claim cause exactly one time-slice
// call with the mapped value (Short = 1) and, once both are gone, one restore.
func compatTimeSlicingShared(t *testing.T, e *Env) {
	ns := e.Namespace(t, "compat-ts")
	before := len(toolCalls(t))
	e.Apply(t, ns, sharedClaimSpec(ns, "            strategy: TimeSlicing\n            timeSlicingConfig: {interval: Short}", ""))
	runningPods(t, e, ns, "", 2)
	u := oneGPU(t, "pod1", smiLines(t, e, ns, "pod1", "ctr", 1))
	if u2 := oneGPU(t, "pod2", smiLines(t, e, ns, "pod2", "ctr", 1)); u2 != u {
		t.Errorf("pods see %s and %s, want the shared GPU", u, u2)
	}
	calls := toolCalls(t)[before:]
	if got := callLines(calls); len(got) != 1 || got[0] != "nvidia-smi compute-policy -i "+u+" --set-timeslice 1" {
		t.Errorf("calls after two pods started: %v, want exactly one time slice Short (1) for %s", got, u)
	}
	deleteNamespaces(t, e, ns)
	Eventually(t, time.Minute, "time slice restored", func() (bool, error) {
		got := callLines(toolCalls(t)[before:])
		return len(got) == 2 && got[1] == "nvidia-smi compute-policy -i "+u+" --set-timeslice 0", fmt.Errorf("calls %v", got)
	})
}

// compatMPS: an MPS claim shared by two pods starts one daemon with the configured defaults, its
// pipe directory is visible in both containers, and unprepare stops it and removes the directory.
func compatMPS(t *testing.T, e *Env) {
	ns := e.Namespace(t, "compat-mps")
	before := len(toolCalls(t))
	e.Apply(t, ns, sharedClaimSpec(ns, "            strategy: MPS\n            mpsConfig: {defaultActiveThreadPercentage: 50, defaultPinnedDeviceMemoryLimit: 10Gi}",
		`echo pipe: $CUDA_MPS_PIPE_DIRECTORY; ls $CUDA_MPS_PIPE_DIRECTORY;`))
	runningPods(t, e, ns, "", 2)
	var u string
	for _, pod := range []string{"pod1", "pod2"} {
		lines := smiLines(t, e, ns, pod, "ctr", 3)
		if len(lines) < 3 || lines[1] != "pipe: /tmp/nvidia-mps" || !hasLine(lines[2:], "control") {
			t.Errorf("%s: %q, want its GPU, the pipe directory /tmp/nvidia-mps and the daemon's control pipe in it", pod, lines)
			continue
		}
		u = oneGPU(t, pod, lines[:1])
	}
	claim, err := e.Kube.ResourceV1().ResourceClaims(ns).Get(context.Background(), "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(compatPluginDir, "mps", string(claim.UID)+"-0")
	calls := toolCalls(t)[before:]
	for _, want := range []string{
		"nvidia-cuda-mps-control -d",
		"mps-daemon started",
		"nvidia-cuda-mps-control set_default_active_thread_percentage 50",
		"nvidia-cuda-mps-control set_default_device_pinned_mem_limit " + u + " 10240M",
	} {
		if n := countCalls(calls, want); n != 1 {
			t.Errorf("%d calls %q, want 1: %v", n, want, callLines(calls))
		}
	}
	for _, c := range calls {
		if c.line() == "nvidia-cuda-mps-control -d" && (c.Env["CUDA_VISIBLE_DEVICES"] != u || c.Env["CUDA_MPS_PIPE_DIRECTORY"] != filepath.Join(dir, "pipe")) {
			t.Errorf("daemon started with %v, want CUDA_VISIBLE_DEVICES=%s and the pipe directory %s", c.Env, u, filepath.Join(dir, "pipe"))
		}
	}
	deleteNamespaces(t, e, ns)
	Eventually(t, time.Minute, "MPS daemon stopped and its directory removed", func() (bool, error) {
		calls := toolCalls(t)[before:]
		_, statErr := os.Stat(dir)
		return countCalls(calls, "mps-daemon exited") == 1 && os.IsNotExist(statErr), fmt.Errorf("dir %v, calls %v", statErr, callLines(calls))
	})
}

func hasLine(l []string, s string) bool {
	for _, x := range l {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}
