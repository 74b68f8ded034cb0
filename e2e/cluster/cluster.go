package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/neuronetes/neuronetes/e2e/images"
)

// Cluster is a running local cluster.
type Cluster struct {
	Paths Paths
	// Kubeconfig is the admin kubeconfig path.
	Kubeconfig string
	// Started is true when this Up call started at least one process.
	Started bool
}

// controlPlane lists the processes in start order.
var controlPlane = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet", "kube-proxy", "coredns"}

// Up brings the local cluster up, or reuses the running one. It is
// idempotent: processes already running are kept.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := NewPaths(opts.Root)
	running, own := runningComponents(p)
	// A run killed before its cluster-down leaves host state that no
	// process owns; clear it before it fails the preflight or is recorded
	// as the host's own.
	bins := runningBinaries()
	if err := clearStaleTables(realHost, bins, logf); err != nil {
		return nil, err
	}
	if err := clearStaleBridge(bins, logf); err != nil {
		return nil, err
	}
	if err := preflight(p, own); err != nil {
		return nil, err
	}
	c := &Cluster{Paths: p, Kubeconfig: p.Kubeconfig, Started: running < len(controlPlane)}
	if !c.Started {
		logf("local cluster already running")
	}
	if err := recordHostState(p); err != nil {
		return nil, fmt.Errorf("recording host state: %w", err)
	}
	pk, err := ensurePKI(p.PKI, componentCerts())
	if err != nil {
		return nil, err
	}
	if err := writeKubeconfig(p.Kubeconfig, pk, "admin", apiServerURL()); err != nil {
		return nil, err
	}
	if err := prepareHostNetwork(); err != nil {
		return nil, err
	}
	// containerd reloads the CNI configuration when it changes.
	if err := writeCNIConfig(p); err != nil {
		return nil, err
	}
	if err := runSteps(logf, []step{
		{"etcd", func() error { return startEtcd(p) }},
		{"kube-apiserver", func() error { return startAPIServer(p, pk) }},
		{"kube-controller-manager", func() error { return startControllerManager(p, pk) }},
		{"kube-scheduler", func() error { return startScheduler(p, pk, opts.SchedulerQPS) }},
		{"containerd", func() error { return startContainerd(p) }},
		{"pause image", func() error { return ensurePauseImage(ctx, p, opts.Root) }},
		{"kubelet", func() error { return startKubelet(p, pk) }},
	}); err != nil {
		return nil, err
	}
	cs, err := c.Clientset()
	if err != nil {
		return nil, err
	}
	if err := waitNodeReady(ctx, cs, p, NodeName, 90*time.Second); err != nil {
		return nil, err
	}
	logf("node %s Ready", NodeName)
	// kube-proxy reads its node's addresses, so it starts after the node
	// registered, and so does the NetworkPolicy enforcer, which filters only
	// the node's pods; CoreDNS resolves the kubernetes Service.
	if err := runSteps(logf, []step{
		{"kube-proxy", func() error { return startKubeProxy(p, pk) }},
		{netpolEnforcer, func() error { return startNetworkPolicies(p, logf) }},
		{"coredns", func() error { return startCoreDNS(ctx, p, pk, cs) }},
	}); err != nil {
		return nil, err
	}
	if opts.KwokNodes > 0 {
		if err := startKwok(ctx, p, pk, cs, opts); err != nil {
			return nil, fmt.Errorf("starting kwok: %w", err)
		}
		logf("%d kwok nodes registered", opts.KwokNodes)
	}
	if opts.RealNodes >= 2 {
		if _, err := EnsureSecondNode(ctx, opts.Root, logf); err != nil {
			return nil, fmt.Errorf("starting the second node: %w", err)
		}
	} else if !SecondNodeRunning(opts.Root) {
		// A Node object left by a second kubelet that was not stopped by cluster-down.
		if err := deleteSecondNodeObject(ctx, p); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// componentPorts are the ports each component listens on.
var componentPorts = map[string][]int{
	"etcd": {EtcdPort, EtcdPeerPort}, "kube-apiserver": {APIServerPort}, "kube-scheduler": {SchedulerPort},
	"kube-controller-manager": {ControllerManagerPort}, "kubelet": {KubeletPort, KubeletHealthzPort},
	"kube-proxy": {KubeProxyHealthzPort, KubeProxyMetricsPort}, "coredns": {DNSPort, CoreDNSReadyPort},
	netpolEnforcer: {NetpolMetricsPort},
}

// runningComponents counts the cluster's running components and returns the
// ports they hold, which preflight must not count as taken.
func runningComponents(p Paths) (int, map[int]bool) {
	running, own := 0, map[int]bool{}
	for _, n := range controlPlane {
		if _, ok := runningPid(p, n); ok {
			running++
			for _, port := range componentPorts[n] {
				own[port] = true
			}
		}
	}
	// The NetworkPolicy enforcer is not in controlPlane: kernels without
	// nftables queue rules run the cluster without it.
	if _, ok := runningPid(p, netpolEnforcer); ok {
		own[NetpolMetricsPort] = true
	}
	return running, own
}

// step is one component start of Up.
type step struct {
	name string
	fn   func() error
}

// runSteps runs the steps in order and logs how long each took.
func runSteps(logf func(string, ...any), steps []step) error {
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(); err != nil {
			return fmt.Errorf("starting %s: %w", s.name, err)
		}
		logf("%-24s ready in %s", s.name, time.Since(start).Round(10*time.Millisecond))
	}
	return nil
}

// ensurePauseImage builds the sandbox image and imports it when containerd
// does not have it.
func ensurePauseImage(ctx context.Context, p Paths, root string) error {
	out, _ := runCtr(ctx, p, "images", "ls", "-q")
	if strings.Contains(out, PauseImage) {
		return nil
	}
	_, err := images.BuildAndImport(ctx, images.Spec{Name: "pause", MainPkg: "./e2e/cmd/pause", Dir: root},
		filepath.Join(p.Local, "images"), p.Binary("ctr"), p.ContainerdSocket())
	return err
}

func runCtr(ctx context.Context, p Paths, args ...string) (string, error) {
	full := append([]string{"--address", p.ContainerdSocket(), "--namespace", "k8s.io"}, args...)
	b, err := execOutput(ctx, p.Binary("ctr"), full...)
	return string(b), err
}

func waitNodeReady(ctx context.Context, cs kubernetes.Interface, p Paths, node string, timeout time.Duration) error {
	return waitNodeReadyProc(ctx, cs, p, "kubelet", node, timeout)
}

// waitNodeReadyProc waits until node is Ready while the kubelet process proc runs.
func waitNodeReadyProc(ctx context.Context, cs kubernetes.Interface, p Paths, proc, node string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "not registered"
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		} else if !apierrors.IsNotFound(err) {
			last = err.Error()
		}
		if _, ok := runningPid(p, proc); !ok {
			return fmt.Errorf("%s exited; last lines of its log:\n%s", proc, logTail(p, proc, 25))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready after %s (%s); last %s log lines:\n%s", node, timeout, last, proc, logTail(p, proc, 25))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// RestConfig returns the admin REST config.
func (c *Cluster) RestConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", c.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// Clientset returns an admin clientset.
func (c *Cluster) Clientset() (kubernetes.Interface, error) {
	cfg, err := c.RestConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Attach returns the running cluster at root, or an error when it is not
// running.
func Attach(root string) (*Cluster, error) {
	p := NewPaths(root)
	for _, n := range controlPlane {
		if _, ok := runningPid(p, n); !ok {
			return nil, fmt.Errorf("%s is not running: %w", n, errNotRunning)
		}
	}
	return &Cluster{Paths: p, Kubeconfig: p.Kubeconfig}, nil
}

// IsNotRunning reports whether err says the cluster is not running.
func IsNotRunning(err error) bool { return errors.Is(err, errNotRunning) }

// Down stops every process the cluster started, by pid, then removes the
// pod cgroups, mounts, network namespaces and bridge it made and restores
// the sysctls it changed. It returns every cleanup error.
func Down(ctx context.Context, root string, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := NewPaths(root)
	var errs []error
	// Host services started for the cluster's pods (make deploy-local's
	// redis-server on the bridge address) go first: the bridge goes away.
	for _, f := range hostServicePidFiles(p) {
		if pid, err := readPid(f); err == nil && alive(pid) {
			stopPid(pid, 5*time.Second)
			logf("stopped host service pid %d (%s)", pid, f)
		}
		_ = os.Remove(f)
	}
	stopKwok(p)
	stopProcess(p, "coredns", 5*time.Second)
	// The enforcer removes its nftables tables on SIGTERM (within 5 s);
	// restoreHost deletes what a killed one left.
	stopProcess(p, netpolEnforcer, 10*time.Second)
	stopProcess(p, "kube-proxy", 5*time.Second)
	stopProcess(p, "kubelet", 15*time.Second)
	if err := stopSecondKubelet(ctx, p, logf); err != nil {
		errs = append(errs, err)
	}
	// Container processes and shims: kill the pod cgroups' processes, then
	// the shims (they live in our tools directory).
	killCgroupProcs(podCgroups())
	for _, pid := range procsUnder(filepath.Join(p.Local, "tools")) {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.Contains(exe, "containerd-shim") {
			stopPid(pid, 2*time.Second)
		}
	}
	stopProcess(p, "containerd", 15*time.Second)
	errs = append(errs, cleanupSecondNode(p)...)
	for _, n := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		stopProcess(p, n, 15*time.Second)
	}
	// Anything else still running from our tools (an orphaned shim, a
	// process whose pid file was lost).
	for _, pid := range clusterProcs(p) {
		stopPid(pid, 2*time.Second)
	}
	killCgroupProcs(podCgroups())
	for _, d := range podCgroups() {
		if err := removeCgroupTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, unmountUnder(p.Containerd)...)
	errs = append(errs, unmountUnder(KubeletRootDir)...)
	errs = append(errs, restoreHost(p, logf)...)
	_ = os.RemoveAll(filepath.Join(p.Containerd, "state"))
	if left := Leftovers(root); len(left) > 0 {
		errs = append(errs, fmt.Errorf("left behind after cluster-down: %s", strings.Join(left, "; ")))
	}
	return errors.Join(errs...)
}

// Leftovers lists what a stopped cluster must not leave behind: its
// processes (kube-proxy, the NetworkPolicy enforcer and CoreDNS included),
// pod cgroups, the bridge, kube-proxy's and the enforcer's nftables tables
// and the Service route.
func Leftovers(root string) []string {
	p := NewPaths(root)
	var out []string
	for _, pid := range clusterProcs(p) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		out = append(out, fmt.Sprintf("process %d (%s)", pid, filepath.Base(exe)))
	}
	for _, d := range podCgroups() {
		out = append(out, "cgroup "+d)
	}
	if fileExists(SecondKubeletRootDir) {
		out = append(out, "directory "+SecondKubeletRootDir)
	}
	if _, err := os.Stat("/sys/class/net/" + BridgeName); err == nil {
		out = append(out, "bridge "+BridgeName)
	}
	if b, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, t := range clusterTablesIn(string(b)) {
			out = append(out, "nftables table "+t)
		}
	}
	if b, err := exec.Command("ip", "-4", "route", "show", ServiceCIDR).Output(); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		out = append(out, "route "+strings.TrimSpace(string(b)))
	}
	return out
}

// hostServicePidFiles lists the pid files of host services that run only
// for the cluster's pods: .local/redis/redis.pid (hack/deploy-local.sh).
func hostServicePidFiles(p Paths) []string {
	var out []string
	for _, f := range []string{filepath.Join(p.Local, "redis", "redis.pid")} {
		if fileExists(f) {
			out = append(out, f)
		}
	}
	return out
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
