package cluster

// The optional second real node: a second kubelet on its own containerd, on
// the same host and bridge as the first. Two kubelets must not share a
// containerd (each kills the running pods it does not know), so node 2 has
// its own containerd root, state, sockets and CNI configuration (the upper
// half of PodCIDR), its own kubelet root directory, healthz port, serving
// address (SecondNodeIP, a /32 on the bridge) and certificates
// (CN=system:node:neuronetes-node-2, so the Node authorizer admits it).
// kube-proxy and CoreDNS are host-wide and serve its pods as they serve the
// first node's; the NetworkPolicy enforcer filters only the first node's
// pods. Node 2 registers with the NoSchedule taint neuronetes.io/second-node,
// so only pods that tolerate it run there: not the DRA driver and node agent
// DaemonSets (whose hostPaths are the first kubelet's), and not the pods of
// tests that do not ask for the second node (NetworkPolicies would not apply).

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/neuronetes/neuronetes/e2e/images"
)

const (
	// SecondNodeName is the name of the optional second real node.
	SecondNodeName = "neuronetes-node-2"
	// SecondNodeIP is the second node's InternalIP: a /32 on the bridge,
	// outside both nodes' pod ranges. Its kubelet serves KubeletPort there.
	SecondNodeIP = "10.88.255.254"
	// SecondKubeletHealthzPort is the second kubelet's healthz port on 127.0.0.1.
	SecondKubeletHealthzPort = 10251
	// SecondKubeletRootDir is the second kubelet's root directory.
	SecondKubeletRootDir = "/var/lib/kubelet-node-2"
	// SecondNodeLabel is the label the second node registers with (value "true"), and the key
	// of the NoSchedule taint it registers with (value "true"): only pods that tolerate it run
	// there, so no other test's pod (nor the driver and node agent DaemonSets) lands on it.
	SecondNodeLabel = "neuronetes.io/second-node"
	// RealNodesEnv names the environment variable that asks the e2e run
	// for real nodes: "2" starts the second node with the cluster.
	RealNodesEnv = "NEURONETES_E2E_REAL_NODES"
	// secondNodeSuffix ends the second node's process names.
	secondNodeSuffix = "-node-2"
	// secondContainerd and secondKubelet are the second node's process names.
	secondContainerd = "containerd" + secondNodeSuffix
	secondKubelet    = "kubelet" + secondNodeSuffix
)

// RealNodesFromEnv returns the number of real nodes RealNodesEnv asks for
// (1 when unset).
func RealNodesFromEnv() (int, error) {
	v := os.Getenv(RealNodesEnv)
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 2 {
		return 0, fmt.Errorf("%s=%q: want 1 or 2", RealNodesEnv, v)
	}
	return n, nil
}

// secondNodePaths are the first node's paths with the second node's
// containerd, CNI configuration and kubelet configuration directories.
func secondNodePaths(p Paths) Paths {
	q := p
	dir := filepath.Join(p.Local, "node-2")
	q.Containerd = filepath.Join(dir, "containerd")
	q.CNIConf = filepath.Join(dir, "cni", "net.d")
	q.Kubelet = filepath.Join(dir, "kubelet")
	return q
}

// secondNode is the second kubelet.
func secondNode(p Paths) kubeletNode {
	q := secondNodePaths(p)
	return kubeletNode{name: SecondNodeName, proc: secondKubelet, ip: SecondNodeIP, port: KubeletPort,
		healthzPort: SecondKubeletHealthzPort, serverCert: "kubelet-server" + secondNodeSuffix,
		clientCert: "kubelet-client" + secondNodeSuffix, socket: q.ContainerdSocket(), configDir: q.Kubelet,
		rootDir: SecondKubeletRootDir, labels: SecondNodeLabel + "=true", taint: SecondNodeLabel}
}

// secondNodeCerts are the second kubelet's client and serving certificates.
func secondNodeCerts() []certSpec {
	n := secondNode(Paths{})
	return []certSpec{
		{name: n.clientCert, cn: "system:node:" + SecondNodeName, orgs: []string{"system:nodes"}, client: true},
		{name: n.serverCert, cn: SecondNodeName, server: true, dns: []string{SecondNodeName}, ips: []net.IP{net.ParseIP(SecondNodeIP)}},
	}
}

// secondContainerdConfig is the first node's containerd configuration over
// q's directories, with NRI off: its socket (/var/run/nri/nri.sock) is
// host-wide and the first containerd holds it.
func secondContainerdConfig(q Paths) string {
	return containerdConfig(q) + `
[plugins."io.containerd.nri.v1.nri"]
  disable = true
`
}

// SecondNodeRunning reports whether the second node's kubelet runs.
func SecondNodeRunning(root string) bool {
	_, ok := runningPid(NewPaths(root), secondKubelet)
	return ok
}

// SecondNodeSocket is the second node's containerd socket.
func SecondNodeSocket(root string) string {
	return secondNodePaths(NewPaths(root)).ContainerdSocket()
}

// EnsureSecondNode starts the second real node on the running cluster at
// root, unless it runs, and waits until it is Ready. Every neuronetes.local
// image of the first node's containerd is copied into the second's. It
// returns how long the start took.
func EnsureSecondNode(ctx context.Context, root string, logf func(string, ...any)) (time.Duration, error) {
	start := time.Now()
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p, q := NewPaths(root), secondNodePaths(NewPaths(root))
	pk, err := ensurePKI(p.PKI, append(componentCerts(), secondNodeCerts()...))
	if err != nil {
		return 0, err
	}
	if err := ensureNodeAddress(SecondNodeIP); err != nil {
		return 0, err
	}
	if err := writeCNIConf(q.CNIConf, cniConfig(secondNodePodRange, filepath.Join(q.Local, "node-2", "cni", "ipam"))); err != nil {
		return 0, err
	}
	if err := runSteps(logf, []step{
		{secondContainerd, func() error { return startContainerdAs(q, secondContainerd, secondContainerdConfig(q)) }},
		{"images of node 2", func() error { return copyImages(ctx, p, q) }},
		{secondKubelet, func() error { return startKubeletFor(p, pk, secondNode(p)) }},
	}); err != nil {
		return 0, err
	}
	cs, err := adminClient(p)
	if err != nil {
		return 0, err
	}
	if err := waitNodeReadyProc(ctx, cs, p, secondKubelet, SecondNodeName, 90*time.Second); err != nil {
		return 0, err
	}
	took := time.Since(start)
	logf("node %s Ready (second node started in %s)", SecondNodeName, took.Round(10*time.Millisecond))
	return took, nil
}

// ensureNodeAddress adds ip/32 to the bridge unless it has it.
func ensureNodeAddress(ip string) error {
	out, _ := exec.Command("ip", "-4", "addr", "show", "dev", BridgeName).CombinedOutput()
	if strings.Contains(string(out), " "+ip+"/") {
		return nil
	}
	if out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", BridgeName).CombinedOutput(); err != nil {
		return fmt.Errorf("adding %s/32 to %s: %v: %s", ip, BridgeName, err, out)
	}
	return nil
}

// copyImages exports every neuronetes.local image of p's containerd and
// imports them into q's, the pinned sandbox image among them.
func copyImages(ctx context.Context, p, q Paths) error {
	out, err := runCtr(ctx, p, "images", "ls", "-q")
	if err != nil {
		return fmt.Errorf("listing node 1's images: %w", err)
	}
	var refs []string
	for _, r := range strings.Fields(out) {
		if strings.HasPrefix(r, images.Registry+"/") {
			refs = append(refs, r)
		}
	}
	if len(refs) == 0 {
		return fmt.Errorf("node 1's containerd has no %s images (not even %s)", images.Registry, PauseImage)
	}
	tar := filepath.Join(q.Local, "node-2", "images.tar")
	if _, err := runCtr(ctx, p, append([]string{"images", "export", tar}, refs...)...); err != nil {
		return fmt.Errorf("exporting node 1's images: %w", err)
	}
	defer os.Remove(tar)
	return images.Import(ctx, p.Binary("ctr"), q.ContainerdSocket(), tar)
}

// adminClient is a clientset with the admin kubeconfig.
func adminClient(p Paths) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", p.Kubeconfig, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// deleteSecondNodeObject deletes the second node's Node object, so a
// cluster without the second kubelet keeps no NotReady node (DaemonSets
// would place pods there that never run).
func deleteSecondNodeObject(ctx context.Context, p Paths) error {
	cs, err := adminClient(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cs.CoreV1().Nodes().Delete(ctx, SecondNodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", SecondNodeName, err)
	}
	return nil
}

// stopSecondKubelet stops the second kubelet and, when it had been
// started, deletes its Node object while the apiserver still runs.
func stopSecondKubelet(ctx context.Context, p Paths, logf func(string, ...any)) error {
	if !fileExists(pidFile(p, secondKubelet)) {
		return nil
	}
	stopProcess(p, secondKubelet, 15*time.Second)
	if _, ok := runningPid(p, "kube-apiserver"); !ok {
		// A killed run: Up deletes the Node object the next time it starts
		// without the second node.
		return nil
	}
	if err := deleteSecondNodeObject(ctx, p); err != nil {
		return err
	}
	logf("deleted node %s", SecondNodeName)
	return nil
}

// cleanupSecondNode stops the second containerd (after the pods' processes
// and shims are gone) and removes its mounts, state and kubelet root.
func cleanupSecondNode(p Paths) []error {
	q := secondNodePaths(p)
	stopProcess(p, secondContainerd, 15*time.Second)
	errs := unmountUnder(q.Containerd)
	errs = append(errs, unmountUnder(SecondKubeletRootDir)...)
	if fileExists(SecondKubeletRootDir) {
		if err := removeAllUnmounting(SecondKubeletRootDir); err != nil {
			errs = append(errs, err)
		}
	}
	_ = os.RemoveAll(filepath.Join(q.Containerd, "state"))
	return errs
}
