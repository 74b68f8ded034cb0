package e2e

// Attacks on the deployment's hardening: a privileged pod in an agent namespace that enforces Pod
// Security "restricted" (which agent pods with the injected sidecar pass), and an outage of the
// controller that serves the fail-closed sidecar webhook.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/images"
)

// restrictedClassYAML is an AgentClass whose agent container meets Pod Security "restricted".
const restrictedClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata:
  name: restricted
spec:
  slo:
    ttft: 500ms
  template:
    spec:
      containers:
      - name: agent
        image: %s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--token-rate=500", "--ttft-base=5ms"]
        ports:
        - containerPort: 8000
        readinessProbe:
          httpGet: {path: /readyz, port: 8000}
          periodSeconds: 1
        securityContext: %s
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: restricted
spec:
  agentClassRef: {name: restricted}
  replicas: 1
  minReplicas: 1
  maxReplicas: 2
  drainGracePeriodSeconds: 1
`

// restrictedNamespace creates a test namespace that enforces Pod Security "restricted".
func restrictedNamespace(t *testing.T, e *Env, prefix string) string {
	t.Helper()
	return e.NamespaceWithPodSecurity(t, prefix, "restricted", "")
}

// startRestrictedPool runs the controller scoped to ns (the demo agent on the sidecar's port stands
// in for the sidecar) and the restricted pool, and waits for its one serving pod to be Ready.
func startRestrictedPool(t *testing.T, e *Env, ns string) *ctrlProc {
	t.Helper()
	ctrlInstallCRDs(t, e)
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	ctl := startController(t, e, ns, agentImg, "--listen=127.0.0.1:7070 --model=sidecar-standin")
	e.Apply(t, ns, fmt.Sprintf(restrictedClassYAML, agentImg, images.RestrictedSecurityContext))
	waitPool(t, e, ns, "restricted", procLogs(ctl), 90*time.Second, "1 Ready serving pod with the sidecar", func() (bool, error) {
		p := poolPods(t, e, ns, "restricted")
		if readyCount(p["serving"]) != 1 {
			return false, fmt.Errorf("serving %v (ready %d)", podNames(p["serving"]), readyCount(p["serving"]))
		}
		pod := p["serving"][0]
		if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != "neuronetes-sidecar" {
			return false, fmt.Errorf("pod %s has no injected sidecar", pod.Name)
		}
		return true, nil
	})
	return ctl
}

// TestAttackPrivilegedPodInRestrictedAgentNamespace: in an agent namespace that enforces Pod
// Security "restricted", a privileged pod that opts into the sidecar is refused, while the pool's
// agent pods, injected sidecar included, are admitted and serve.
func TestAttackPrivilegedPodInRestrictedAgentNamespace(t *testing.T) {
	e := requireEnv(t)
	ns := restrictedNamespace(t, e, "psa")
	startRestrictedPool(t, e, ns)

	attack := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "escalate", Labels: map[string]string{nnv1.InjectSidecarLabel: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "root", Image: e.Image(t, "demo-agent", "./cmd/demo-agent"), ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
		}}},
	}
	_, err := e.Kube.CoreV1().Pods(ns).Create(context.Background(), attack, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("a privileged pod was admitted into a namespace enforcing restricted")
	}
	if !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("privileged pod refused for another reason: %v", err)
	}
}

// controllerComebackBound is how long after a restarted controller serves again a deleted pool pod
// must be back and Ready (docs/user-guide.md states it).
const controllerComebackBound = 60 * time.Second

// TestAttackControllerOutageBlocksAgentPods: while the only controller is down, the fail-closed
// webhook refuses every opted-in pod (so production runs two replicas with a PDB); once it serves
// again, the pool's deleted pod is created again and Ready within controllerComebackBound.
func TestAttackControllerOutageBlocksAgentPods(t *testing.T) {
	e := requireEnv(t)
	ns := restrictedNamespace(t, e, "outage")
	ctl := startRestrictedPool(t, e, ns)
	ctx := context.Background()

	ctl.kill()
	before := poolPods(t, e, ns, "restricted")["serving"]
	if len(before) != 1 {
		t.Fatalf("serving pods before the outage %v, want 1", podNames(before))
	}
	if err := e.Kube.CoreV1().Pods(ns).Delete(ctx, before[0].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	optIn := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "during-outage", Labels: map[string]string{nnv1.InjectSidecarLabel: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "agent", Image: e.Image(t, "demo-agent", "./cmd/demo-agent"), ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot: ptr(true), AllowPrivilegeEscalation: ptr(false),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		}}},
	}
	if _, err := e.Kube.CoreV1().Pods(ns).Create(ctx, optIn, metav1.CreateOptions{}); err == nil {
		t.Fatal("an opted-in pod was created without its sidecar while the webhook was down")
	} else if !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("opted-in pod refused for another reason: %v", err)
	}

	ctl.start()
	back := time.Now()
	waitPool(t, e, ns, "restricted", procLogs(ctl), controllerComebackBound, "the deleted pool pod back and Ready", func() (bool, error) {
		p := poolPods(t, e, ns, "restricted")["serving"]
		return readyCount(p) == 1 && p[0].UID != before[0].UID, fmt.Errorf("serving %v (ready %d)", podNames(p), readyCount(p))
	})
	t.Logf("pool pod created again and Ready %s after the controller came back", time.Since(back).Round(100*time.Millisecond))
}
