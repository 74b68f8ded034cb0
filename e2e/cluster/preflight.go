package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// PreflightError names the missing piece of a broken environment.
type PreflightError struct {
	Problems []string
}

func (e *PreflightError) Error() string {
	return "local cluster preflight failed:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// requiredCgroupControllers are the v1 controllers kubelet and runc need.
var requiredCgroupControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer"}

// preflight checks everything Up needs before it starts anything, so that a
// broken environment gives a message naming the missing piece, never a hang:
// root, binaries, runc and CNI plugins, cgroups, overlayfs, nftables,
// conntrack, br_netfilter and free ports (53 on the bridge address included).
// Ports held by this cluster's own running processes are not problems.
func preflight(p Paths, ownPorts map[int]bool) error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "the local cluster needs root (kubelet, containerd, runc and the CNI bridge)")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet", "kubectl", "kube-proxy", netpolEnforcer, "coredns", "containerd", "containerd-shim-runc-v2", "ctr"} {
		if _, err := os.Stat(p.Binary(b)); err != nil {
			problems = append(problems, fmt.Sprintf("binary %s is missing: run `make tools` (hack/build-tools.sh)", p.Binary(b)))
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		problems = append(problems, "runc is not installed: run hack/install-deps.sh (Debian package runc)")
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(cniBinDir + "/" + plugin); err != nil {
			problems = append(problems, fmt.Sprintf("CNI plugin %s/%s is missing: run hack/install-deps.sh (Debian package containernetworking-plugins)", cniBinDir, plugin))
		}
	}
	if missing, err := missingCgroupControllers(); err != nil {
		problems = append(problems, err.Error())
	} else if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("cgroup controllers not enabled: %s (kubelet and runc need them)", strings.Join(missing, ", ")))
	}
	if !filesystemSupported("overlay") {
		problems = append(problems, "the overlay filesystem is not available (containerd's overlayfs snapshotter needs it; try `modprobe overlay`)")
	}
	problems = append(problems, netPreflight(realHost, ownPorts)...)
	problems = append(problems, busyPorts(clusterPorts, ownPorts)...)
	if len(problems) > 0 {
		return &PreflightError{Problems: problems}
	}
	return nil
}

func missingCgroupControllers() ([]string, error) {
	f, err := os.Open("/proc/cgroups")
	if err != nil {
		return nil, fmt.Errorf("reading /proc/cgroups: %w", err)
	}
	defer f.Close()
	enabled := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 4 && fields[3] == "1" {
			enabled[fields[0]] = true
		}
	}
	var missing []string
	for _, c := range requiredCgroupControllers {
		if !enabled[c] {
			missing = append(missing, c)
		}
	}
	return missing, nil
}

func filesystemSupported(fs string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == fs {
			return true
		}
	}
	return false
}

// portSpec is one listening address of the cluster.
type portSpec struct {
	host string
	port int
	who  string
}

// clusterPorts are the addresses the cluster's processes listen on.
var clusterPorts = []portSpec{
	{"127.0.0.1", EtcdPort, "etcd"}, {"127.0.0.1", EtcdPeerPort, "etcd peer"},
	{"127.0.0.1", SchedulerPort, "kube-scheduler"},
	{"127.0.0.1", ControllerManagerPort, "kube-controller-manager"}, {"127.0.0.1", KubeletHealthzPort, "kubelet healthz"},
	{"127.0.0.1", KubeProxyHealthzPort, "kube-proxy healthz"}, {"127.0.0.1", KubeProxyMetricsPort, "kube-proxy metrics"},
	{"127.0.0.1", CoreDNSReadyPort, "CoreDNS readiness"}, {"127.0.0.1", NetpolMetricsPort, "NetworkPolicy enforcer metrics"},
	// The bridge address may not exist yet: probe every address.
	{"0.0.0.0", APIServerPort, "kube-apiserver"}, {"0.0.0.0", KubeletPort, "kubelet"},
}

// busyPorts returns a problem for each port that something other than this
// cluster already holds.
func busyPorts(ports []portSpec, own map[int]bool) []string {
	var problems []string
	for _, pt := range ports {
		if own[pt.port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(pt.host, strconv.Itoa(pt.port)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("port %d (%s) is already in use: %v", pt.port, pt.who, err))
			continue
		}
		_ = l.Close()
	}
	return problems
}

// errNotRunning reports that no local cluster is running.
var errNotRunning = errors.New("the local cluster is not running (run `make cluster-up`)")
