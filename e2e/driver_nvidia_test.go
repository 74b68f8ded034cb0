package e2e

// Helpers of the NVIDIA compatibility e2e test: the `nvidia-smi -L` test image under the image
// names NVIDIA's specs use, the recording stand-in for the GPU sharing tools, and the chart
// release of the driver in compatibility mode.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilptr "k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/e2e/images"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

// compatPluginDir is the driver's plugin directory in compatibility mode.
const compatPluginDir = "/var/lib/kubelet/plugins/" + model.CompatDriverName

// compatToolsDir holds the recording stand-ins of nvidia-smi and nvidia-cuda-mps-control, inside
// the plugin directory, which the driver's container mounts at the same path.
const compatToolsDir = compatPluginDir + "/e2e-tools"

// importNVSMIImage imports the nvidia-smi stand-in under NVIDIA's image names
// (images.ImportNVSMI, also `make nvidia-images`), once per run.
func importNVSMIImage(t *testing.T, e *Env) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.images["nvsmi"]; ok {
		return
	}
	if err := images.CheckBusybox(); err != nil {
		testreq.Tool(t, "busybox-static", "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p := e.Cluster.Paths
	if err := images.ImportNVSMI(ctx, e.Root, filepath.Join(p.Local, "images"), p.Binary("ctr"), p.ContainerdSocket()); err != nil {
		t.Fatal(err)
	}
	e.images["nvsmi"] = images.NVIDIAImageNames[0]
}

// installStandIns builds e2e/cmd/gputools (static, it runs in the driver's container) as
// nvidia-smi and nvidia-cuda-mps-control in compatToolsDir and removes the directory at cleanup.
func installStandIns(t *testing.T, e *Env) {
	t.Helper()
	if err := os.MkdirAll(compatToolsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(compatToolsDir, "nvidia-smi")
	cmd := exec.Command("go", "build", "-o", bin, "./e2e/cmd/gputools")
	cmd.Dir = e.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	if err := os.Link(bin, filepath.Join(compatToolsDir, "nvidia-cuda-mps-control")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(compatToolsDir, "calls.log"))
}

// toolCall is one line of the stand-in's calls.log (e2e/cmd/gputools Call).
type toolCall struct {
	Tool  string            `json:"tool"`
	Args  []string          `json:"args"`
	Env   map[string]string `json:"env"`
	Stdin string            `json:"stdin"`
	Event string            `json:"event"`
}

// line is the call as "<tool> <event> <args> <stdin>", single-spaced.
func (c toolCall) line() string {
	return strings.Join(strings.Fields(c.Tool+" "+c.Event+" "+strings.Join(c.Args, " ")+" "+c.Stdin), " ")
}

// toolCalls returns the calls recorded so far.
func toolCalls(t *testing.T) []toolCall {
	t.Helper()
	f, err := os.Open(filepath.Join(compatToolsDir, "calls.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []toolCall
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c toolCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("calls.log: %v", err)
		}
		out = append(out, c)
	}
	return out
}

// countCalls counts the recorded calls whose line is want.
func countCalls(calls []toolCall, want string) int {
	n := 0
	for _, c := range calls {
		if c.line() == want {
			n++
		}
	}
	return n
}

// installCompatRelease installs the chart with only the driver, in compatibility mode on the
// dgxa100 mock with the stand-ins as its sharing tools, and uninstalls it at cleanup together
// with what outlives the driver (its slices and plugin directory).
func installCompatRelease(t *testing.T, e *Env, helm string) {
	t.Helper()
	ctx := context.Background()
	ns := e.Namespace(t, "nn-compat")
	args := []string{"upgrade", "--install", "nn-compat", "deploy/helm/neuronetes", "--kubeconfig", e.Kubeconfig, "--namespace", ns,
		"-f", "deploy/helm/values/local.yaml", "--wait", "--timeout", "3m",
		"--set", "controller.enabled=false", "--set", "webhook.enabled=false", "--set", "nodeagent.enabled=false", "--set", "gateway.enabled=false",
		"--set", "driver.compat=true", "--set", "driver.nvml=mock:dgxa100",
		"--set", "driver.metricsPort=19431", "--set", "driver.metricsBindAddress=127.0.0.1",
		"--set", "driver.sharing.nvidiaSMI=" + compatToolsDir + "/nvidia-smi",
		"--set", "driver.sharing.mpsControl=" + compatToolsDir + "/nvidia-cuda-mps-control"}
	// DeviceClasses are cluster-wide: when another installation owns NeuroNetes' classes, the
	// release creates none and NVIDIA's two are applied here.
	if _, err := e.Kube.ResourceV1().DeviceClasses().Get(ctx, model.DriverName, metav1.GetOptions{}); err == nil {
		args = append(args, "--set", "deviceClasses.create=false")
		raw, err := os.ReadFile(filepath.Join(e.Root, "deploy", "deviceclasses", "compat", "nvidia.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		e.Apply(t, "", string(raw))
	}
	t.Cleanup(func() {
		cmd := exec.Command(helm, "uninstall", "nn-compat", "--kubeconfig", e.Kubeconfig, "--namespace", ns, "--wait", "--timeout", "2m")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("helm uninstall: %v\n%s", err, out)
		}
		bg := context.Background()
		Eventually(t, time.Minute, "compat driver pods gone", func() (bool, error) {
			pods, err := e.Kube.CoreV1().Pods(ns).List(bg, metav1.ListOptions{})
			return err == nil && len(pods.Items) == 0, fmt.Errorf("%v", err)
		})
		_ = e.Kube.ResourceV1().ResourceSlices().DeleteCollection(bg, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + model.CompatDriverName + ",spec.nodeName=" + e.NodeName})
		_ = os.RemoveAll(compatPluginDir)
	})
	cmd := exec.Command(helm, args...)
	cmd.Dir = e.Root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Logf("[e2e] compat release installed in %s", time.Since(start).Round(time.Millisecond))
}

// compatDevices returns the gpu.nvidia.com devices of the node by name with their uuid (or
// parentUUID) and index attributes.
func compatDevices(t *testing.T, e *Env) map[string][2]string {
	t.Helper()
	l, err := e.Kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: "spec.driver=" + model.CompatDriverName + ",spec.nodeName=" + e.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			u := attr(d, "uuid")
			if u == "" {
				u = attr(d, "parentUUID")
			}
			idx := ""
			if a, ok := d.Attributes["index"]; ok && a.IntValue != nil {
				idx = fmt.Sprint(*a.IntValue)
			}
			out[d.Name] = [2]string{u, idx}
		}
	}
	return out
}

var (
	gpuLine = regexp.MustCompile(`^GPU \d+: .+ \(UUID: (GPU-[0-9a-f-]+)\)$`)
	migLine = regexp.MustCompile(`^  MIG (\S+) +Device +\d+: \(UUID: (MIG-[0-9a-f-]+)\)$`)
)

// smiLines waits for a container's `nvidia-smi -L` output and returns its lines.
func smiLines(t *testing.T, e *Env, ns, pod, container string, want int) []string {
	t.Helper()
	var lines []string
	Eventually(t, time.Minute, fmt.Sprintf("nvidia-smi -L of %s/%s/%s", ns, pod, container), func() (bool, error) {
		out, err := e.KubectlErr("-n", ns, "logs", pod, "-c", container)
		// A running container may not have printed yet: its log is empty, which is no line.
		lines = nil
		for _, l := range strings.Split(out, "\n") {
			if strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
		}
		return err == nil && len(lines) >= want, fmt.Errorf("logs %q: %v", out, err)
	})
	return lines
}

// deleteNamespaces deletes namespaces (NVIDIA's specs create their own) and waits until they and
// their claims are gone, so the next scenario finds every GPU free.
func deleteNamespaces(t *testing.T, e *Env, names ...string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		_ = e.Kube.CoreV1().Namespaces().Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: utilptr.To[int64](0)})
	}
	for _, n := range names {
		Eventually(t, 3*time.Minute, "namespace "+n+" gone", func() (bool, error) {
			_, err := e.Kube.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
			return err != nil, fmt.Errorf("still there")
		})
	}
}
