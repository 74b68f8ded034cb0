package e2e

// The cluster's optional second real node (e2e/cluster/node2.go): tests that need two nodes that
// serve traffic call requireSecondNode.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/e2e/cluster"
)

// requireSecondNode starts the cluster's second real node unless it runs and returns how long the
// start took (0 when it was running).
func (e *Env) requireSecondNode(t testing.TB) time.Duration {
	t.Helper()
	if cluster.SecondNodeRunning(e.Root) {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	took, err := cluster.EnsureSecondNode(ctx, e.Root, t.Logf)
	if err != nil {
		t.Fatalf("starting node %s: %v", cluster.SecondNodeName, err)
	}
	return took
}

// pinnedAgentPod is a demo-agent pod on one node.
const pinnedAgentPod = `apiVersion: v1
kind: Pod
metadata: {name: %[1]s}
spec:
  nodeSelector: {kubernetes.io/hostname: %[2]s}
  tolerations: [{key: %[4]s, operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 1
  containers:
  - name: agent
    image: %[3]s
    imagePullPolicy: Never
    args: ["--listen=:8000"]
`

// TestSecondNodeServesPods: the second node starts on the running cluster (its start cost is
// logged); a pod that does not tolerate its taint is not scheduled there; a pod scheduled there runs on the second containerd with an address from the second
// node's half of the pod range and serves the host; the apiserver reaches its kubelet (logs); and
// a pod of the first node keeps running beside it (neither kubelet kills the other's pods).
func TestSecondNodeServesPods(t *testing.T) {
	e := requireEnv(t)
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	took := e.requireSecondNode(t)
	t.Logf("second node start: %s (0 = it was running)", took.Round(10*time.Millisecond))
	ns := e.Namespace(t, "node2")
	e.Apply(t, ns, fmt.Sprintf(pinnedAgentPod, "on-a", e.NodeName, img, cluster.SecondNodeLabel)+"---\n"+
		fmt.Sprintf(pinnedAgentPod, "on-b", cluster.SecondNodeName, img, cluster.SecondNodeLabel)+"---\n"+
		fmt.Sprintf(pinnedAgentPod, "untolerated", cluster.SecondNodeName, img, "neuronetes.io/something-else"))
	a := e.WaitPodRunning(t, ns, "on-a", 2*time.Minute)
	b := e.WaitPodRunning(t, ns, "on-b", 2*time.Minute)
	if b.Spec.NodeName != cluster.SecondNodeName || !strings.HasPrefix(b.Status.PodIP, "10.88.") || net.ParseIP(b.Status.PodIP)[14] < 128 {
		t.Fatalf("pod on-b on %s at %s; want %s and an address in 10.88.128.0/17", b.Spec.NodeName, b.Status.PodIP, cluster.SecondNodeName)
	}
	if net.ParseIP(a.Status.PodIP)[14] >= 128 {
		t.Errorf("pod on-a at %s; want the first node's half 10.88.0.0/17", a.Status.PodIP)
	}
	for _, p := range []string{a.Status.PodIP, b.Status.PodIP} {
		Eventually(t, time.Minute, "demo agent /readyz at "+p, func() (bool, error) {
			resp, err := http.Get("http://" + net.JoinHostPort(p, "8000") + "/readyz")
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	}
	if out, err := e.KubectlErr("-n", ns, "logs", "on-b"); err != nil {
		t.Errorf("kubectl logs of the pod on %s (apiserver -> second kubelet): %v %s", cluster.SecondNodeName, err, out)
	}
	// A pod that does not tolerate the second node's taint does not run there.
	Eventually(t, 30*time.Second, "pod untolerated unschedulable", func() (bool, error) {
		p, err := e.Kube.CoreV1().Pods(ns).Get(context.Background(), "untolerated", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return p.Spec.NodeName == "", nil
			}
		}
		return false, fmt.Errorf("node %q, conditions %v", p.Spec.NodeName, p.Status.Conditions)
	})
	// Both kubelets' pod syncs have run (syncFrequency 10s): neither killed the other's pod.
	time.Sleep(12 * time.Second)
	for _, n := range []string{"on-a", "on-b"} {
		p, err := e.Kube.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.RestartCount != 0 || st.State.Running == nil {
				t.Errorf("pod %s container %s: restarts %d, state %+v", n, st.Name, st.RestartCount, st.State)
			}
		}
	}
}
