// Package cluster runs a real Kubernetes v1.37 cluster as local processes:
// etcd, kube-apiserver, kube-scheduler, kube-controller-manager, one real
// kubelet on containerd 2 with CDI and a CNI bridge, kube-proxy in nftables
// mode, CoreDNS, and optional kwok nodes. All state lives under <root>/.local.
// Every port binds to 127.0.0.1 except those pods must reach, which bind the
// node address on the cluster's own bridge (nn0, 10.88.0.1): the apiserver
// (the endpoint of the kubernetes Service), the kubelet (the node's
// InternalIP) and CoreDNS (the pods' nameserver).
package cluster

import (
	"path/filepath"
)

// Default addresses and names of the local cluster.
const (
	// NodeName is the name of the one real kubelet node.
	NodeName = "neuronetes-node"
	// BridgeName is the CNI bridge the cluster creates and removes.
	BridgeName = "nn0"
	// NodeIP is the bridge gateway address; the kubelet serves on it and pods
	// reach host services there.
	NodeIP = "10.88.0.1"
	// PodCIDR is the range the bridge's host-local IPAM hands out.
	PodCIDR = "10.88.0.0/16"
	// ServiceCIDR is the ClusterIP range. kube-proxy serves it; the host
	// routes it through the bridge so host clients use the node address.
	ServiceCIDR = "10.96.0.0/16"
	// KubernetesServiceIP is the ClusterIP of the kubernetes Service (the
	// first address of ServiceCIDR), in the apiserver's certificate.
	KubernetesServiceIP = "10.96.0.1"
	// ClusterDomain is the DNS domain of Services and pods.
	ClusterDomain = "cluster.local"
	// DNSPort is CoreDNS's port on NodeIP (UDP and TCP); NodeIP is every
	// pod's nameserver.
	DNSPort = 53
	// CoreDNSReadyPort is CoreDNS's readiness endpoint on 127.0.0.1.
	CoreDNSReadyPort = 10055
	// KubeProxyHealthzPort is kube-proxy's healthz port on 127.0.0.1.
	KubeProxyHealthzPort = 10256
	// KubeProxyMetricsPort is kube-proxy's metrics port on 127.0.0.1.
	KubeProxyMetricsPort = 10249
	// NetpolMetricsPort is the NetworkPolicy enforcer's metrics port on 127.0.0.1.
	NetpolMetricsPort = 10246
	// APIServerPort is the apiserver's secure port on NodeIP.
	APIServerPort = 6443
	// EtcdPort is etcd's client port on 127.0.0.1.
	EtcdPort = 2379
	// EtcdPeerPort is etcd's peer port on 127.0.0.1.
	EtcdPeerPort = 2380
	// SchedulerPort is kube-scheduler's secure port on 127.0.0.1.
	SchedulerPort = 10259
	// ControllerManagerPort is kube-controller-manager's secure port on 127.0.0.1.
	ControllerManagerPort = 10257
	// KubeletPort is the kubelet's API port on NodeIP.
	KubeletPort = 10250
	// KubeletHealthzPort is the kubelet's healthz port on 127.0.0.1.
	KubeletHealthzPort = 10248
	// KwokPort is kwok's server port on 127.0.0.1.
	KwokPort = 10247
	// KubernetesVersion is the version every component must report.
	KubernetesVersion = "v1.37.2"
	// PauseImage is the sandbox image built locally and pinned in containerd.
	PauseImage = "neuronetes.local/pause:dev"
	// KwokNodeAnnotation marks nodes that kwok manages.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// KubeletRootDir is the kubelet's root; DRA plugins register below it.
	KubeletRootDir = "/var/lib/kubelet"
)

// Options configure Up.
type Options struct {
	// Root is the repository root; state lives in Root/.local.
	Root string
	// RealNodes is the number of real kubelet nodes: 2 also starts the
	// second node (node2.go); 0 and 1 start only the first.
	RealNodes int
	// KwokNodes is the number of kwok nodes to create (0 for none).
	KwokNodes int
	// KwokNodeTemplate, when set, is called for each kwok node index and
	// returns extra labels to put on it.
	KwokNodeLabels func(i int) map[string]string
	// SchedulerQPS is the scheduler's client QPS (burst is twice that);
	// 0 means 5000, high enough that scale runs measure the scheduler itself.
	SchedulerQPS int
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Paths locates every file the cluster reads or writes.
type Paths struct {
	Local      string // <root>/.local
	Bin        string // binaries from hack/build-tools.sh
	PKI        string
	Run        string // pid files and the state file
	Logs       string
	Etcd       string
	Kubeconfig string // admin kubeconfig
	Containerd string
	CNIConf    string
	Kubelet    string // kubelet's config and certs (not its root dir)
	Kwok       string
}

// NewPaths returns the paths for a repository root.
func NewPaths(root string) Paths {
	local := filepath.Join(root, ".local")
	return Paths{
		Local:      local,
		Bin:        filepath.Join(local, "bin"),
		PKI:        filepath.Join(local, "pki"),
		Run:        filepath.Join(local, "run"),
		Logs:       filepath.Join(local, "logs"),
		Etcd:       filepath.Join(local, "etcd"),
		Kubeconfig: filepath.Join(local, "kubeconfig"),
		Containerd: filepath.Join(local, "containerd"),
		CNIConf:    filepath.Join(local, "cni", "net.d"),
		Kubelet:    filepath.Join(local, "kubelet"),
		Kwok:       filepath.Join(local, "kwok"),
	}
}

// ContainerdSocket is the containerd gRPC socket of the local cluster.
func (p Paths) ContainerdSocket() string { return filepath.Join(p.Containerd, "containerd.sock") }

// Binary returns the path of a built binary.
func (p Paths) Binary(name string) string { return filepath.Join(p.Bin, name) }
