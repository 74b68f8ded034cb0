package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ctrlProc is the controller running as a host process.
type ctrlProc struct {
	t           *testing.T
	bin         string
	args        []string
	log         *os.File
	cmd         *exec.Cmd
	exited      chan error // receives the process's Wait result once; nil before start
	metricsAddr string
}

// usedPorts holds every port freePort handed out in this test process: the kernel may return a
// port again once its probe listener is closed, and two servers of one controller must never
// be given the same port.
var usedPorts sync.Map

// freePort returns a loopback port that was free a moment ago and that no earlier call returned.
func freePort(t *testing.T) int {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, dup := usedPorts.LoadOrStore(port, true); !dup {
			return port
		}
	}
}

func (c *ctrlProc) start() {
	c.t.Helper()
	c.cmd = exec.Command(c.bin, c.args...)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("start controller: %v", err)
	}
	c.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan<- error) { exited <- cmd.Wait() }(c.cmd, c.exited)
	// A loaded machine can take a while to run the first discovery calls; a controller that
	// exits is reported at once with its status (its log follows at cleanup).
	Eventually(c.t, 90*time.Second, "controller metrics endpoint", func() (bool, error) {
		select {
		case err := <-c.exited:
			c.exited <- err
			c.t.Fatalf("controller exited before serving metrics: %v", err)
		default:
		}
		resp, err := http.Get("http://" + c.metricsAddr + "/metrics")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return true, nil
	})
}

func (c *ctrlProc) kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.exited
		c.cmd = nil
	}
}

func (c *ctrlProc) metrics() string {
	resp, err := http.Get("http://" + c.metricsAddr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// startController builds and runs cmd/controller scoped to ns, with its webhook registered by URL.
//
// The autoscaling loop is off unless extra turns it on (--autoscaler=true): tests of the reconciler
// set replicas themselves. extra flags come last and so override the defaults.
func startController(t *testing.T, e *Env, ns, sidecarImage, sidecarArgs string, extra ...string) *ctrlProc {
	bin := e.HostBinary(t, "./cmd/controller")
	whPort, mPort := freePort(t), freePort(t)
	cfgName := "neuronetes-sidecar-e2e-" + ns
	logf, err := os.Create(filepath.Join(t.TempDir(), "controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	c := &ctrlProc{t: t, bin: bin, log: logf, metricsAddr: fmt.Sprintf("127.0.0.1:%d", mPort), args: []string{
		"--kubeconfig", e.Kubeconfig, "--namespace", ns,
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", mPort), "--health-addr", "0",
		"--webhook-host", "127.0.0.1", "--webhook-port", fmt.Sprint(whPort),
		"--webhook-url", fmt.Sprintf("https://127.0.0.1:%d", whPort), "--webhook-config-name", cfgName,
		"--webhook-cert-dir", t.TempDir(), "--sidecar-image", sidecarImage, "--sidecar-args", sidecarArgs,
		"--leader-elect=false", "-v=2", "--autoscaler=false", "--scale-webhook-addr=",
		"--egress-allow-cidrs=" + e2eEgressAllow,
	}}
	if !strings.Contains(sidecarImage, "/sidecar:") {
		// A stand-in sidecar image has no /sidecar binary for the exec probe.
		c.args = append(c.args, "--sidecar-probe-command=")
	}
	c.args = append(c.args, extra...)
	t.Cleanup(func() {
		c.kill()
		_ = e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), cfgName, metav1.DeleteOptions{})
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 64000 {
				b = b[len(b)-64000:]
			}
			t.Logf("controller log tail:\n%s", b)
		}
		logf.Close()
	})
	c.start()
	return c
}

// poolPods returns the pool's live pods by state.
func poolPods(t *testing.T, e *Env, ns, pool string) map[string][]corev1.Pod {
	t.Helper()
	l, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=" + pool})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	out := map[string][]corev1.Pod{}
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		out[p.Labels[nnv1.StateLabel]] = append(out[p.Labels[nnv1.StateLabel]], p)
	}
	return out
}

func readyCount(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}
