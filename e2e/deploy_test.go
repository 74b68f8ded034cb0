package e2e

// Deploy e2e: the Helm chart against the real local apiserver (server-side dry run of several value
// sets), then hack/deploy-local.sh into a release of its own, the driver scenarios against the
// chart-installed driver, every example of deploy/examples, and the dashboard's metrics scraped
// from the running components.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/images"
	"github.com/neuronetes/neuronetes/internal/testreq"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// Ports of the e2e release, apart from the defaults (the release's pods share the node with those of
// other tests and of `make deploy-local`).
const (
	deployCtrlMetrics = 19402
	deployDriverPort  = 19401
)

// deployHelm returns .local/bin/helm or skips.
func deployHelm(t *testing.T, e *Env) string {
	t.Helper()
	p := filepath.Join(e.Root, ".local", "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		testreq.Tool(t, "helm", "not built (%v): run `bash hack/build-tools.sh helm` (make tools does)", err)
	}
	return p
}

// decodeObjects splits a multi-document manifest into objects.
func decodeObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding manifest: %v", err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// applyObject server-side applies obj (optionally as a dry run) with strict field validation.
func (e *Env) applyObject(ctx context.Context, obj *unstructured.Unstructured, namespace string, dryRun bool) error {
	ri, err := e.resourceFor(obj, namespace)
	if err != nil {
		return fmt.Errorf("mapping %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: "neuronetes-e2e-deploy", Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	return err
}

// TestDeployChartDryRun renders the chart with several value sets and validates every object
// against the real apiserver by server-side dry run (schema, CEL rules, admission), nothing created.
func TestDeployChartDryRun(t *testing.T) {
	e := requireEnv(t)
	helm := deployHelm(t, e)
	ns := e.Namespace(t, "nn-deploy-dry")
	sets := map[string][]string{
		"default":         nil,
		"mock-nvml-local": {"-f", "deploy/helm/values/local.yaml"},
		"no-webhook":      {"-f", "deploy/helm/values/local.yaml", "--set", "webhook.enabled=false"},
		"helm-tls":        {"--set", "webhook.tls.mode=helm"},
		"kind":            {"-f", "deploy/helm/values/kind.yaml"},
		"production":      {"-f", "deploy/helm/values/production-example.yaml"},
	}
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"template", "nn-dry", "deploy/helm/neuronetes", "--namespace", ns, "--include-crds"}, sets[name]...)
			cmd := exec.Command(helm, args...)
			cmd.Dir = e.Root
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm template: %v: %s", err, stderr.String())
			}
			n := 0
			for _, obj := range decodeObjects(t, string(out)) {
				if obj.GetAPIVersion() == "monitoring.coreos.com/v1" {
					// The Prometheus Operator CRDs are not installed on the local cluster: ServiceMonitors
					// are only rendered and checked by deploy/helm/chart_test.go.
					continue
				}
				if err := e.applyObject(context.Background(), obj, ns, true); err != nil {
					t.Errorf("dry run of %s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
				n++
			}
			t.Logf("[e2e] %s: %d objects accepted by server-side dry run", name, n)
		})
	}
}

// deployRelease is one chart installation made by hack/deploy-local.sh for this test.
type deployRelease struct {
	t               *testing.T // the test that owns the release; example objects are cleaned up with it
	name, namespace string
	exampleNS       string // the namespace the controller watches
	redisAddr       string
	// afterUninstall runs after the release is uninstalled (what its pods would undo otherwise).
	afterUninstall []func()
}

// nodeSlices selects the ResourceSlices of gpu.neuronetes.io on the real node (kwok nodes of the
// scale tests carry simulated slices of the same driver).
func nodeSlices(e *Env) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: "spec.driver=gpu.neuronetes.io,spec.nodeName=" + e.NodeName}
}

// otherDriver names a running driver DaemonSet or ResourceSlices of gpu.neuronetes.io on the node
// that this test did not create, or "".
func otherDriver(ctx context.Context, e *Env, ownNS string) string {
	dss, err := e.Kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ds := range dss.Items {
			for _, c := range ds.Spec.Template.Spec.Containers {
				if ds.Namespace != ownNS && strings.Contains(c.Image, "/driver:") {
					return "DaemonSet " + ds.Namespace + "/" + ds.Name
				}
			}
		}
	}
	slices, err := e.Kube.ResourceV1().ResourceSlices().List(ctx, nodeSlices(e))
	if err == nil && len(slices.Items) > 0 {
		return fmt.Sprintf("%d ResourceSlices of gpu.neuronetes.io (a driver process)", len(slices.Items))
	}
	return ""
}

// installRelease builds the images, waits for any other gpu.neuronetes.io driver to go (the kubelet
// registration socket is per driver name and node), runs hack/deploy-local.sh and uninstalls at
// cleanup.
func installRelease(t *testing.T, e *Env) *deployRelease {
	t.Helper()
	deployHelm(t, e)
	ctx := context.Background()
	r := &deployRelease{t: t, name: "nn-e2e"}
	r.namespace = e.NamespaceWithPodSecurity(t, "nn-deploy", "privileged",
		"the release's driver and node agent run as root with kubelet and cache hostPaths (privileged with real NVML or checkpoints)")
	r.exampleNS = e.NamespaceWithPodSecurity(t, "nn-deploy-ex", "restricted", "")
	deadline := time.Now().Add(90 * time.Second)
	for other := otherDriver(ctx, e, r.namespace); other != ""; other = otherDriver(ctx, e, r.namespace) {
		if time.Now().After(deadline) {
			testreq.Tool(t, "the node to itself", "another gpu.neuronetes.io driver runs on the node (%s); the chart's driver cannot register next to it", other)
		}
		time.Sleep(2 * time.Second)
	}
	e.Image(t, "driver", "./cmd/driver", images.WithCgo())
	for _, c := range []string{"nodeagent", "controller", "gateway", "sidecar", "demo-agent"} {
		e.Image(t, c, "./cmd/"+c)
	}
	sched := images.CommandSpec(e.Root, images.Scheduler)
	e.Image(t, images.Scheduler, sched.MainPkg, images.WithDir(sched.Dir))
	if redistest.Binary() == "" {
		testreq.Tool(t, "redis-server", "not installed: injected sidecars need Redis")
	}
	r.redisAddr = redistest.Start(t, redistest.Options{Bind: "10.88.0.1"}).Addr
	helmArgs := strings.Join([]string{
		"--set controller.watchNamespace=" + r.exampleNS,
		"--set webhook.configName=neuronetes-sidecar-injector-" + r.namespace,
		fmt.Sprintf("--set controller.metricsPort=%d --set controller.healthPort=19403 --set webhook.port=19443", deployCtrlMetrics),
		fmt.Sprintf("--set driver.metricsPort=%d --set driver.metricsBindAddress=127.0.0.1", deployDriverPort),
		"--set nodeagent.metricsPort=19465 --set nodeagent.probePort=19466",
		"--set nodeagent.runDir=/var/run/neuronetes-e2e --set nodeagent.cacheDir=/var/lib/neuronetes-e2e/models",
		// The node agent's checkpointing (on in values/local.yaml): the release's own store and
		// staging directory on the node (SessionSuspendResumeChart, SessionWarmRestoreHost).
		"--set nodeagent.checkpoint.storeDir=" + deployCheckpointStore + " --set nodeagent.checkpoint.workDir=" + deployCheckpointWork,
		// The session controller's RBAC, admission policies and NetworkPolicy file (RBACAllowlist,
		// AdmissionPolicies).
		"--set controller.agentSessions.enabled=true --set controller.agentSessions.restoreHostImage=" + cluster.PauseImage,
	}, " ")
	t.Cleanup(func() {
		cmd := exec.Command("bash", "hack/deploy-local.sh", "--uninstall")
		cmd.Dir = e.Root
		cmd.Env = append(os.Environ(), "RELEASE="+r.name, "NAMESPACE="+r.namespace)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("uninstall: %v\n%s", err, out)
		}
		for _, f := range r.afterUninstall {
			f()
		}
		removeDeployCheckpointDirs(t)
	})
	cmd := exec.Command("bash", "hack/deploy-local.sh")
	cmd.Dir = e.Root
	cmd.Env = append(os.Environ(), "RELEASE="+r.name, "NAMESPACE="+r.namespace, "SKIP_IMAGES=1", "SCHEDULER=1",
		"REDIS_ADDR="+r.redisAddr, "HELM_TIMEOUT=3m", "HELM_ARGS="+helmArgs)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/deploy-local.sh: %v\n%s", err, out)
	}
	t.Logf("[e2e] chart installed and ready in %s", time.Since(start).Round(time.Millisecond))
	return r
}

// TestDeployLocal installs the chart like `make deploy-local`, checks every component is Ready,
// runs the driver scenarios (a GPU pod, a MIG pod) against the chart-installed driver, applies
// every example and scrapes the metrics the Grafana dashboard queries.
func TestDeployLocal(t *testing.T) {
	e := requireEnv(t)
	r := installRelease(t, e)
	ctx := context.Background()

	t.Run("ComponentsReady", func(t *testing.T) {
		pods, err := e.Kube.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if !cs.Ready {
					t.Errorf("pod %s container %s is not ready", p.Name, cs.Name)
				}
				seen[cs.Name] = true
			}
		}
		for _, c := range []string{"driver", "nodeagent", "controller", "gateway", "scheduler"} {
			if !seen[c] {
				t.Errorf("no %s container in the release (have %v)", c, seen)
			}
		}
		Eventually(t, time.Minute, "ResourceSlices of the chart-installed driver", func() (bool, error) {
			l, err := e.Kube.ResourceV1().ResourceSlices().List(ctx, nodeSlices(e))
			return err == nil && len(l.Items) > 0, err
		})
	})
	t.Run("DriverGPUAndMIGPods", func(t *testing.T) { deployDriverScenarios(t, e) })
	t.Run("RBACAllowlist", func(t *testing.T) { deployRBACAllowlist(t, e, r) })
	t.Run("SchedulerBindsPods", func(t *testing.T) { deploySchedulerBindsPods(t, e, r) })
	t.Run("AttackSchedulerAccount", func(t *testing.T) { deployAttackSchedulerAccount(t, e, r) })
	t.Run("AttackSchedulerNetwork", func(t *testing.T) { deployAttackSchedulerNetwork(t, e, r) })
	t.Run("AdmissionPolicies", func(t *testing.T) { deployAdmissionPolicies(t, e, r) })
	t.Run("AttackGatewayReadsSecret", func(t *testing.T) { deployAttackGatewayReadsSecret(t, e, r) })
	t.Run("AttackModelSourceSecrets", func(t *testing.T) { deployAttackModelSourceSecrets(t, e, r) })
	t.Run("AttackNodeAgentReadsReleaseSecret", func(t *testing.T) { deployAttackNodeAgentReadsReleaseSecret(t, e, r) })
	examplesOK := t.Run("Examples", func(t *testing.T) { deployExamples(t, e, r) })
	t.Run("AttackNetworkPolicy", func(t *testing.T) {
		if !examplesOK {
			t.Fatal("needs the walkthrough pool of the Examples subtest, which failed")
		}
		deployAttackNetworkPolicy(t, e, r)
	})
	t.Run("AttackAgentEgressOverDNSPort", func(t *testing.T) {
		if !examplesOK {
			t.Fatal("needs the agent NetworkPolicy of the Examples' namespace, which failed")
		}
		deployAttackAgentEgressOverDNSPort(t, e, r)
	})
	t.Run("AttackSessionEgress", func(t *testing.T) { deployAttackSessionEgress(t, e, r) })
	t.Run("SessionSuspendResumeChart", func(t *testing.T) { deploySessionSuspendResumeChart(t, e, r) })
	t.Run("SessionWarmPool", func(t *testing.T) { deploySessionWarmPool(t, e, r) })
	t.Run("SessionWarmRestoreHost", func(t *testing.T) { deploySessionWarmRestoreHost(t, e, r) })
	t.Run("PoolThroughSessions", func(t *testing.T) { deployPoolThroughSessions(t, e, r) })
	t.Run("OpenAISDK", func(t *testing.T) { deployOpenAISDK(t, e, r) })
	t.Run("DashboardMetrics", func(t *testing.T) {
		if !examplesOK {
			t.Skip("needs the walkthrough pool of the Examples subtest, which failed")
		}
		deployDashboardMetrics(t, e, r)
	})
}

// deployDriverScenarios runs the driver's two basic scenarios against the chart-installed driver:
// a pod with a whole GPU and a pod with a dynamic MIG slice, each seeing its device through CDI
// (the smoke image prints NVIDIA_* variables).
func deployDriverScenarios(t *testing.T, e *Env) {
	smoke := e.Image(t, "smoke", "./e2e/cmd/smoke")
	ns := e.NamespaceWithPodSecurity(t, "nn-deploy-drv", "restricted", "")
	for _, tc := range []struct{ name, class string }{{"gpu", "gpu.neuronetes.io"}, {"mig", "mig-1g.5gb.neuronetes.io"}} {
		e.Apply(t, ns, fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: %[1]s}
spec:
  devices:
    requests:
    - name: dev
      exactly: {deviceClassName: %[2]s}
---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s}
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims: [{name: dev, resourceClaimName: %[1]s}]
  containers:
  - name: smoke
    image: %[3]s
    imagePullPolicy: Never
    securityContext: %[4]s
    resources: {claims: [{name: dev}]}
`, tc.name, tc.class, smoke, images.RestrictedSecurityContext))
	}
	for _, tc := range []struct{ name, want string }{{"gpu", "NVIDIA_VISIBLE_DEVICES=GPU-"}, {"mig", "NVIDIA_VISIBLE_DEVICES=MIG-"}} {
		e.WaitPodRunning(t, ns, tc.name, 2*time.Minute)
		Eventually(t, 30*time.Second, tc.name+" pod logs with its CDI device", func() (bool, error) {
			out, err := e.KubectlErr("-n", ns, "logs", tc.name)
			return err == nil && strings.Contains(out, tc.want), fmt.Errorf("logs %q: %v", out, err)
		})
	}
}
