package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/images"
	"github.com/neuronetes/neuronetes/e2e/kube"
)

// env is the shared cluster environment; nil when e2e tests are disabled or
// the cluster could not start.
var env *Env

// envSkipReason explains why env is nil.
var envSkipReason = "e2e tests are disabled; set NEURONETES_E2E=1 (make test does)"

// Env gives e2e tests access to the local real cluster.
type Env struct {
	Root       string
	Kubeconfig string
	Config     *rest.Config
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface
	NodeName   string
	Cluster    *cluster.Cluster

	applier *kube.Applier

	mu     sync.Mutex
	images map[string]string
	bins   map[string]string
}

// requireEnv returns the environment or skips the test with the reason.
func requireEnv(t testing.TB) *Env {
	t.Helper()
	if env == nil {
		t.Skip(envSkipReason)
	}
	return env
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv("NEURONETES_E2E") != "1" {
		return m.Run()
	}
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	logf := func(f string, a ...any) { fmt.Printf("[e2e] "+f+"\n", a...) }
	kwokNodes := 1
	if v := os.Getenv("NEURONETES_E2E_KWOK_NODES"); v != "" {
		if kwokNodes, err = strconv.Atoi(v); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: NEURONETES_E2E_KWOK_NODES=%q is not a number\n", v)
			return 1
		}
	}
	realNodes, err := cluster.RealNodesFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	c, err := cluster.Up(ctx, cluster.Options{Root: root, KwokNodes: kwokNodes, RealNodes: realNodes, Logf: logf})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the local cluster could not start: %v\n", err)
		// What did start (etcd, the apiserver, ...) must not outlive the run.
		if derr := cluster.Down(ctx, root, logf); derr != nil {
			fmt.Fprintf(os.Stderr, "e2e: cluster-down after the failed start: %v\n", derr)
		}
		return 1
	}
	if c.Started && os.Getenv("NEURONETES_E2E_KEEP") != "1" {
		defer func() {
			if err := cluster.Down(ctx, root, logf); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: cluster-down: %v\n", err)
				os.Exit(1)
			}
			logf("cluster-down left nothing behind")
		}()
	}
	e, err := newEnv(root, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	if err := noReleaseInstalled(ctx, e); err != nil {
		// make run leaves its release installed, and the cluster keeps it across cluster-down.
		logf("%v: uninstalling it (bash hack/deploy-local.sh --uninstall)", err)
		cmd := exec.CommandContext(ctx, "bash", "hack/deploy-local.sh", "--uninstall")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: uninstalling the local release: %v\n%s", err, out)
			return 1
		}
		if err := noReleaseInstalled(ctx, e); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v; uninstall it first\n", err)
			return 1
		}
	}
	env = e
	return m.Run()
}

// noReleaseInstalled reports a NeuroNetes controller already deployed in the cluster (make run and
// make deploy-local leave their release installed, and the cluster keeps it across cluster-down):
// it reconciles and autoscales AgentPools in every namespace, so the tests' pools would have two
// controllers and the tests would measure both.
func noReleaseInstalled(ctx context.Context, e *Env) error {
	deps, err := e.Kube.AppsV1().Deployments("").List(ctx,
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=neuronetes,app.kubernetes.io/component=controller"})
	if err != nil {
		return fmt.Errorf("listing NeuroNetes controllers: %w", err)
	}
	for _, d := range deps.Items {
		if d.Spec.Replicas == nil || *d.Spec.Replicas > 0 {
			return fmt.Errorf("NeuroNetes controller %s/%s is installed in the local cluster and would also reconcile "+
				"the tests' pools", d.Namespace, d.Name)
		}
	}
	return nil
}

func newEnv(root string, c *cluster.Cluster) (*Env, error) {
	cfg, err := c.RestConfig()
	if err != nil {
		return nil, err
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	applier, err := kube.NewApplier(cfg, "neuronetes-e2e")
	if err != nil {
		return nil, err
	}
	return &Env{
		Root: root, Kubeconfig: c.Kubeconfig, Config: cfg, Kube: clientset, Dynamic: applier.Dynamic(),
		NodeName: cluster.NodeName, Cluster: c, applier: applier,
		images: map[string]string{}, bins: map[string]string{},
	}, nil
}

func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("e2e: go.mod not found above " + wd)
}

// Image builds mainPkg into neuronetes.local/<name>:dev and imports it into
// containerd, once per test run.
func (e *Env) Image(t testing.TB, name, mainPkg string, opts ...images.Option) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if ref, ok := e.images[name]; ok {
		return ref
	}
	spec := images.Spec{Name: name, MainPkg: mainPkg, Dir: e.Root}
	for _, o := range opts {
		o(&spec)
	}
	p := e.Cluster.Paths
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ref, err := images.BuildAndImport(ctx, spec, filepath.Join(p.Local, "images"), p.Binary("ctr"), p.ContainerdSocket())
	if err != nil {
		t.Fatalf("building image %s: %v", name, err)
	}
	if cluster.SecondNodeRunning(e.Root) {
		// BuildAndImport left the tarball at <workDir>/<name>.tar.
		tar := filepath.Join(p.Local, "images", spec.Name+".tar")
		if err := images.Import(ctx, p.Binary("ctr"), cluster.SecondNodeSocket(e.Root), tar); err != nil {
			t.Fatalf("importing image %s into node %s: %v", name, cluster.SecondNodeName, err)
		}
	}
	e.images[name] = ref
	return ref
}

// HostBinary builds mainPkg for the host once per run and returns its path.
func (e *Env) HostBinary(t testing.TB, mainPkg string) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.bins[mainPkg]; ok {
		return p
	}
	out := filepath.Join(e.Root, ".local", "e2e-bin", filepath.Base(mainPkg))
	cmd := exec.Command("go", "build", "-o", out, mainPkg)
	cmd.Dir = e.Root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", mainPkg, err, b)
	}
	e.bins[mainPkg] = out
	return out
}

// Namespace creates a fresh namespace that is deleted at cleanup. It carries no Pod Security label
// (the cluster's default, privileged); NamespaceWithPodSecurity names the level a test needs.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	return e.namespace(t, prefix, nil)
}

// NamespaceWithPodSecurity creates a fresh namespace, deleted at cleanup, that enforces the Pod
// Security level ("restricted", "baseline" or "privileged"), so a pod of the test that needs more
// than that level is refused. why says what the test's pods need the level for; it must be set for
// any level below restricted.
func (e *Env) NamespaceWithPodSecurity(t testing.TB, prefix, level, why string) string {
	t.Helper()
	switch {
	case level != "restricted" && level != "baseline" && level != "privileged":
		t.Fatalf("namespace %s: Pod Security level %q, want restricted, baseline or privileged", prefix, level)
	case level != "restricted" && why == "":
		t.Fatalf("namespace %s: Pod Security %s without a reason", prefix, level)
	}
	labels := map[string]string{"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}
	if why != "" {
		t.Logf("[e2e] namespace %s-*: Pod Security %s: %s", prefix, level, why)
	}
	return e.namespace(t, prefix, labels)
}

func (e *Env) namespace(t testing.TB, prefix string, labels map[string]string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	// The service account controller creates "default" asynchronously; pods
	// cannot be created before it exists.
	Eventually(t, 30*time.Second, "default service account in "+ns.Name, func() (bool, error) {
		_, err := e.Kube.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	t.Cleanup(func() {
		_ = e.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Apply server-side applies every object in a multi-document YAML manifest;
// objects without a namespace get namespace when they are namespaced. The
// objects are deleted in reverse order at cleanup.
func (e *Env) Apply(t testing.TB, namespace, manifest string) {
	t.Helper()
	done, err := e.applier.Apply(context.Background(), namespace, manifest)
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		for i := len(done) - 1; i >= 0; i-- {
			err := done[i].Resource.Delete(context.Background(), done[i].Name, metav1.DeleteOptions{PropagationPolicy: &bg})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Logf("cleanup: deleting %s %s: %v", done[i].Kind, done[i].Name, err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Kubectl runs kubectl against the cluster and returns its stdout; it fails
// the test on error.
func (e *Env) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.KubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// KubectlErr runs kubectl and returns stdout and an error carrying stderr.
func (e *Env) KubectlErr(args ...string) (string, error) {
	cmd := exec.Command(e.Cluster.Paths.Binary("kubectl"), append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// Eventually polls cond every 200ms until it returns true or the timeout
// passes, then fails the test naming what it waited for and the last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := kube.WaitFor(context.Background(), timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// WaitPodRunning waits until a pod is Running with every container ready.
func (e *Env) WaitPodRunning(t testing.TB, namespace, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	Eventually(t, timeout, "pod "+namespace+"/"+name+" running", func() (bool, error) {
		p, err := e.Kube.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		if p.Status.Phase != corev1.PodRunning {
			return false, fmt.Errorf("phase %s: %s", p.Status.Phase, podWaitingReason(p))
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready {
				return false, fmt.Errorf("container %s not ready", cs.Name)
			}
		}
		return true, nil
	})
	return pod
}

func podWaitingReason(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, string(c.Type)+": "+c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, cs.Name+": "+w.Reason+" "+w.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// resourceFor maps obj to its dynamic resource (see kube.Applier.ResourceFor).
func (e *Env) resourceFor(obj *unstructured.Unstructured, namespace string) (dynamic.ResourceInterface, error) {
	return e.applier.ResourceFor(obj, namespace)
}
