package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cniBinDir is where Debian's containernetworking-plugins installs plugins.
const cniBinDir = "/usr/lib/cni"

// hostState records what Up found on the host, so Down restores exactly it.
type hostState struct {
	// Sysctls holds the original value of every sysctl the cluster may change.
	Sysctls map[string]string `json:"sysctls"`
	// NetnsBefore lists the named network namespaces present before Up.
	NetnsBefore []string `json:"netnsBefore"`
	// DirsExisted records which of hostDirs were there before Up; Down
	// removes the ones that were not.
	DirsExisted map[string]bool `json:"dirsExisted"`
	// Net is the nftables and route state before Up; Down compares the host
	// against it. NetRecorded is false in a state file written before the
	// cluster recorded it.
	Net         hostNet `json:"net"`
	NetRecorded bool    `json:"netRecorded"`
}

// watchedSysctls are the sysctls that the CNI bridge or kubelet may change.
var watchedSysctls = []string{
	"net/ipv4/ip_forward",
	"net/ipv6/conf/all/forwarding",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	// kube-proxy is configured to leave these alone; they are watched so a
	// change is undone all the same.
	"net/ipv4/conf/all/route_localnet",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
}

// hostDirs are the host directories the cluster and its node components
// may create: the kubelet root, CDI spec directories, containerd's shim
// socket directory and the NeuroNetes node directories.
var hostDirs = []string{KubeletRootDir, "/etc/cdi", "/var/run/cdi", "/run/containerd", "/var/lib/neuronetes", "/var/run/neuronetes"}

func statePath(p Paths) string { return filepath.Join(p.Run, "host-state.json") }

// recordHostState saves the host's state once; a state saved by an earlier
// Up that was never torn down is kept, since it holds the true originals.
func recordHostState(p Paths) error {
	if fileExists(statePath(p)) {
		return nil
	}
	st := hostState{Sysctls: map[string]string{}, DirsExisted: map[string]bool{}}
	for _, s := range watchedSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			st.Sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	st.NetnsBefore = listNetns()
	for _, d := range hostDirs {
		st.DirsExisted[d] = fileExists(d)
	}
	nst, err := snapshotNet()
	if err != nil {
		return err
	}
	st.Net, st.NetRecorded = nst, true
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.Run, 0o755); err != nil {
		return err
	}
	return os.WriteFile(statePath(p), b, 0o644)
}

func loadHostState(p Paths) (*hostState, error) {
	b, err := os.ReadFile(statePath(p))
	if err != nil {
		return nil, err
	}
	var st hostState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", statePath(p), err)
	}
	return &st, nil
}

func listNetns() []string {
	ents, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// ensureBridge creates the cluster bridge with the node address, so the
// kubelet can bind to it before the first pod exists. The CNI bridge plugin
// adopts the existing bridge.
func ensureBridge() error {
	if out, err := exec.Command("ip", "link", "show", BridgeName).CombinedOutput(); err != nil {
		if out2, err := exec.Command("ip", "link", "add", BridgeName, "type", "bridge").CombinedOutput(); err != nil {
			return fmt.Errorf("creating bridge %s: %v: %s (after %s)", BridgeName, err, out2, out)
		}
	}
	addr := NodeIP + "/16"
	if out, _ := exec.Command("ip", "-4", "addr", "show", "dev", BridgeName).CombinedOutput(); !strings.Contains(string(out), addr) {
		if out, err := exec.Command("ip", "addr", "add", addr, "dev", BridgeName).CombinedOutput(); err != nil {
			return fmt.Errorf("adding %s to %s: %v: %s", addr, BridgeName, err, out)
		}
	}
	if out, err := exec.Command("ip", "link", "set", BridgeName, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bringing %s up: %v: %s", BridgeName, err, out)
	}
	return nil
}

// prepareHostNetwork creates the bridge, routes the Service range through
// it and lets bridged pod traffic pass the netfilter hooks.
func prepareHostNetwork() error {
	if err := ensureBridge(); err != nil {
		return err
	}
	if err := ensureServiceRoute(); err != nil {
		return err
	}
	return ensureBridgeNetfilter()
}

// bridgeNFCall is the sysctl that sends bridged IPv4 traffic through the
// netfilter hooks. kube-proxy needs it for a pod that calls a Service whose
// endpoint is on the same bridge: the reply is bridged, and only conntrack
// turns its source back into the ClusterIP. Down restores its old value.
const bridgeNFCall = "net/bridge/bridge-nf-call-iptables"

func ensureBridgeNetfilter() error {
	b, err := os.ReadFile("/proc/sys/" + bridgeNFCall)
	if err != nil {
		return fmt.Errorf("reading %s (is br_netfilter loaded?): %w", bridgeNFCall, err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile("/proc/sys/"+bridgeNFCall, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("setting %s=1: %w", bridgeNFCall, err)
	}
	return nil
}

// writeCNIConfig writes the bridge network used by containerd's CRI plugin.
// Pods route the pod range on the bridge and the Service range through the
// node address, where kube-proxy translates ClusterIPs; they get no default
// route, so nothing they send leaves the cluster's own addresses. ipMasq
// stays off so the CNI plugin adds no NAT rule to the host. The first node
// hands out the lower half of PodCIDR, the optional second node the upper
// half (node2.go), each from its own host-local data directory.
func writeCNIConfig(p Paths) error {
	return writeCNIConf(p.CNIConf, cniConfig(firstNodePodRange, filepath.Join(p.Local, "cni", "ipam")))
}

// writeCNIConf writes conf as the one network in dir.
func writeCNIConf(dir, conf string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-neuronetes.conflist"), []byte(conf), 0o644)
}

// podRange is the part of PodCIDR one node's host-local IPAM hands out.
type podRange struct{ start, end string }

// The real nodes' halves of PodCIDR (10.88.0.0/16); SecondNodeIP is above both.
var (
	firstNodePodRange  = podRange{"10.88.0.2", "10.88.127.254"}
	secondNodePodRange = podRange{"10.88.128.1", "10.88.255.253"}
)

// cniConfig renders the bridge network list for one node's containerd.
func cniConfig(r podRange, ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "neuronetes",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "rangeStart": %q, "rangeEnd": %q, "gateway": %q}]],
        "routes": [{"dst": %q}],
        "dataDir": %q
      }
    },
    {"type": "loopback"}
  ]
}
`, BridgeName, PodCIDR, r.start, r.end, NodeIP, ServiceCIDR, ipamDir)
}

// restoreHost undoes what Up changed on the host: kube-proxy's nftables
// tables, the Service route, the bridge, leftover network namespaces,
// sysctls, and directories it created; then it compares the host's network
// state with the one recorded before Up.
func restoreHost(p Paths, logf func(string, ...any)) []error {
	var errs []error
	st, err := loadHostState(p)
	if err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	before := map[string]bool{}
	if st != nil {
		for _, n := range st.NetnsBefore {
			before[n] = true
		}
	}
	for _, n := range listNetns() {
		if before[n] || !strings.HasPrefix(n, "cni-") {
			continue
		}
		path := filepath.Join("/var/run/netns", n)
		_ = unmount(path)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("removing netns %s: %w", path, err))
		}
	}
	errs = append(errs, removeClusterNet(st, logf)...)
	if out, err := exec.Command("ip", "link", "show", BridgeName).CombinedOutput(); err == nil {
		if out2, err := exec.Command("ip", "link", "del", BridgeName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %v: %s", BridgeName, err, out2))
		} else {
			logf("removed bridge %s", BridgeName)
		}
	} else {
		_ = out
	}
	if st != nil {
		for s, v := range st.Sysctls {
			cur, err := os.ReadFile("/proc/sys/" + s)
			if err != nil || strings.TrimSpace(string(cur)) == v {
				continue
			}
			if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", s, v, err))
			} else {
				logf("restored sysctl %s=%s", strings.ReplaceAll(s, "/", "."), v)
			}
		}
		for d, existed := range st.DirsExisted {
			if existed {
				continue
			}
			if err := removeAllUnmounting(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if st != nil && st.NetRecorded {
		now, err := snapshotNet()
		if err != nil {
			return append(errs, err)
		}
		if diff := diffNet(st.Net, now); len(diff) > 0 {
			// The state file stays, so a second cluster-down compares again.
			return append(errs, fmt.Errorf("the host differs from its state before cluster-up (%s): %s", statePath(p), strings.Join(diff, "; ")))
		}
	}
	_ = os.Remove(statePath(p))
	return errs
}
