package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/images"
	"github.com/neuronetes/neuronetes/e2e/kube"
)

// demoNamespace holds the demo's workloads.
const demoNamespace = "neuronetes-demo"

// systemNamespace is where hack/deploy-local.sh installs the chart.
const systemNamespace = "neuronetes-system"

type demo struct {
	root    string
	start   time.Time
	c       *cluster.Cluster
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	applier *kube.Applier
	results []string

	weightsURL, weightsDigest string
	// gatewayURL and conv are the gateway Service and the conversation of the demo, for the
	// summary's curl.
	gatewayURL, conv string
}

type step struct {
	name string
	fn   func(context.Context) error
}

func (d *demo) connect(c *cluster.Cluster) error {
	cfg, err := c.RestConfig()
	if err != nil {
		return err
	}
	d.c = c
	if d.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if d.applier, err = kube.NewApplier(cfg, "neuronetes-demo"); err != nil {
		return err
	}
	d.dyn = d.applier.Dynamic()
	return nil
}

func (d *demo) steps() []step {
	return []step{
		{"serve demo model weights on the cluster bridge", d.startWeightsServer},
		{"build and import images", d.buildImages},
		{"smoke pod with a locally built image", d.smokePod},
		{"deploy NeuroNetes with the Helm chart (make deploy-local)", d.deploy},
		{"a pod with one whole GPU through DRA", d.gpuPod("gpu-pod", "gpu.neuronetes.io")},
		{"a pod with a dynamic MIG 1g.10gb slice", d.gpuPod("mig-pod", "mig-1g.10gb.neuronetes.io")},
		{"prewarm a model on the node", d.warmModel},
		{"agent pool with a warm pool, scale-up and a shared conversation", d.agentPool},
	}
}

// image builds one cmd/ (or e2e/cmd/) command into the local containerd.
func (d *demo) image(ctx context.Context, spec images.Spec) (string, error) {
	p := d.c.Paths
	return images.BuildAndImport(ctx, spec, filepath.Join(p.Local, "images"), p.Binary("ctr"), p.ContainerdSocket())
}

// demoImages are the commands the demo runs: what hack/deploy-local.sh installs with
// deploy/helm/values/local.yaml (its default IMAGES) and the agent of the demo's pool. Commands
// that the chart does not install locally (the dispatcher, CLIs) are not built.
var demoImages = []string{"driver", "nodeagent", "controller", "gateway", "sidecar", "demo-agent"}

func (d *demo) buildImages(ctx context.Context) error {
	var specs []images.Spec
	for _, name := range demoImages {
		specs = append(specs, images.CommandSpec(d.root, name))
	}
	specs = append(specs, images.Spec{Name: "smoke", MainPkg: "./e2e/cmd/smoke", Dir: d.root})
	for _, spec := range specs {
		start := time.Now()
		ref, err := d.image(ctx, spec)
		if err != nil {
			return err
		}
		logf("   %s (%s)", ref, time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}

// restrictedLabels make a namespace enforce Pod Security "restricted": the demo's pods (agents with
// the injected sidecar, the smoke and GPU pods) meet it, so a regression fails `make run`.
var restrictedLabels = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
}

// ensureNamespace creates ns enforcing restricted, or labels it so when an earlier run created it.
func (d *demo) ensureNamespace(ctx context.Context, ns string) error {
	_, err := d.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: restrictedLabels}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": restrictedLabels}})
		_, err = d.kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	return waitFor(ctx, 30*time.Second, "default service account in "+ns, func() (bool, error) {
		_, err := d.kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func (d *demo) smokePod(ctx context.Context) error {
	if err := d.ensureNamespace(ctx, demoNamespace); err != nil {
		return err
	}
	_ = d.kube.CoreV1().Pods(demoNamespace).Delete(ctx, "smoke", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err := waitFor(ctx, 60*time.Second, "old smoke pod gone", func() (bool, error) {
		_, err := d.kube.CoreV1().Pods(demoNamespace).Get(ctx, "smoke", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return err
	}
	if err := d.apply(ctx, demoNamespace, images.SmokePod(cluster.NodeName, images.Ref("smoke"), "hello-from-make-run")); err != nil {
		return err
	}
	if err := d.waitPodRunning(ctx, demoNamespace, "smoke", 90*time.Second); err != nil {
		return err
	}
	var logs string
	err := waitFor(ctx, 20*time.Second, "smoke pod logs", func() (bool, error) {
		b, err := d.kube.CoreV1().Pods(demoNamespace).GetLogs("smoke", &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(b)
		return err == nil && strings.Contains(logs, "SMOKE_GREETING"), err
	})
	if err != nil {
		return err
	}
	d.results = append(d.results, "smoke pod logs: "+strings.Join(strings.Fields(logs), " "))
	return nil
}

// apply server-side applies a multi-document manifest.
func (d *demo) apply(ctx context.Context, namespace, manifest string) error {
	_, err := d.applier.Apply(ctx, namespace, manifest)
	return err
}

func (d *demo) waitPodRunning(ctx context.Context, ns, name string, timeout time.Duration) error {
	return waitFor(ctx, timeout, "pod "+ns+"/"+name+" running", func() (bool, error) {
		p, err := d.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, fmt.Errorf("phase %s", p.Status.Phase)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready {
				return false, fmt.Errorf("container %s not ready", cs.Name)
			}
		}
		return true, nil
	})
}

func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return kube.WaitFor(ctx, timeout, what, cond)
}

// summary prints what runs where and how to look at it.
func (d *demo) summary(ctx context.Context) error {
	nodes, err := d.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Println("==================== NeuroNetes local cluster ====================")
	fmt.Println("Nodes:")
	kwok := 0
	for _, n := range nodes.Items {
		if n.Annotations[cluster.KwokNodeAnnotation] != "" {
			kwok++
			continue
		}
		ready := "NotReady"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = "Ready"
			}
		}
		fmt.Printf("  %-20s %-8s kubelet %s, InternalIP %s\n", n.Name, ready, n.Status.NodeInfo.KubeletVersion, internalIP(n))
	}
	if kwok > 0 {
		fmt.Printf("  (and %d kwok nodes)\n", kwok)
	}
	slices, err := d.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + cluster.NodeName})
	if err != nil {
		return err
	}
	perDriver := map[string]int{}
	counterSets := 0
	for _, s := range slices.Items {
		perDriver[s.Spec.Driver] += len(s.Spec.Devices)
		counterSets += len(s.Spec.SharedCounters)
	}
	fmt.Printf("Devices advertised on %s: %d ResourceSlices, %d counter sets (one per MIG-capable GPU); NVML backend %s\n",
		cluster.NodeName, len(slices.Items), counterSets, d.nvmlBackend(ctx))
	for _, drv := range sortedKeys(perDriver) {
		fmt.Printf("  %-28s %d devices\n", drv, perDriver[drv])
	}
	claims, err := d.kube.ResourceV1().ResourceClaims(demoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("ResourceClaims in %s: %d\n", demoNamespace, len(claims.Items))
	for _, c := range claims.Items {
		state := "pending"
		if c.Status.Allocation != nil {
			var devs []string
			for _, r := range c.Status.Allocation.Devices.Results {
				devs = append(devs, r.Device)
			}
			state = "allocated " + strings.Join(devs, ",")
		}
		fmt.Printf("  %s: %s\n", c.Name, state)
	}
	pods, err := d.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Println("Pods (NeuroNetes and the demo):")
	others := 0
	for _, p := range pods.Items {
		if p.Namespace != demoNamespace && p.Namespace != systemNamespace {
			others++
			continue
		}
		state := p.Labels["neuronetes.io/state"]
		fmt.Printf("  %-48s %-8s %-8s %s\n", p.Namespace+"/"+p.Name, p.Status.Phase, state, strings.Join(containerNames(p), ","))
	}
	if others > 0 {
		fmt.Printf("  (and %d pods in other namespaces)\n", others)
	}
	if out, err := exec.CommandContext(ctx, d.c.Paths.Binary("kubectl"), "--kubeconfig", d.c.Kubeconfig, "get", "agentpools,models", "-A").CombinedOutput(); err == nil {
		fmt.Println("NeuroNetes objects:")
		for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			fmt.Println("  " + l)
		}
	}
	fmt.Println("Demo:")
	for _, r := range d.results {
		if strings.HasPrefix(r, "  ") {
			fmt.Println("  " + r) // a detail of the result above
			continue
		}
		fmt.Println("  - " + r)
	}
	kubectl := filepath.Join(d.c.Paths.Bin, "kubectl")
	if rel, err := filepath.Rel(d.root, kubectl); err == nil {
		kubectl = rel
	}
	fmt.Printf("\nThe cluster stays up (%s). Look around with:\n", time.Since(d.start).Round(time.Second))
	fmt.Printf("  %s --kubeconfig .local/kubeconfig get nodes,resourceslices,pods -A\n", kubectl)
	if d.gatewayURL != "" {
		fmt.Println("Continue the conversation through the gateway (paste in the repository root; streamed, on the same pod):")
		for _, l := range curlLines(kubectl, ".local/kubeconfig", d.gatewayURL, d.conv, "and how do I get there from the airport") {
			fmt.Println("  " + l)
		}
	}
	fmt.Println("Stop it with: make cluster-down")
	return nil
}

// nvmlBackend returns the --nvml argument of the deployed driver (the mock
// profile, such as mock:dgxa100 from deploy/helm/values/local.yaml).
func (d *demo) nvmlBackend(ctx context.Context) string {
	dss, err := d.kube.AppsV1().DaemonSets(systemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, ds := range dss.Items {
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--nvml="); ok && c.Name == "driver" {
					return v
				}
			}
		}
	}
	return "unknown (no driver DaemonSet in " + systemNamespace + ")"
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ptr[T any](v T) *T { return &v }

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return "?"
}

func containerNames(p corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}
