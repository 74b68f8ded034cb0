package cluster

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// hostProbe is how netPreflight looks at the host; tests replace it.
type hostProbe struct {
	lookPath func(string) (string, error)
	// nft runs nft with args and returns its combined output.
	nft      func(args ...string) (string, error)
	exists   func(path string) bool
	readFile func(path string) (string, error)
}

// realHost probes this machine.
var realHost = hostProbe{
	lookPath: exec.LookPath,
	nft: func(args ...string) (string, error) {
		out, err := exec.Command("nft", args...).CombinedOutput()
		return string(out), err
	},
	exists:   fileExists,
	readFile: readProcNet,
}

// nfqueueProc exists while the kernel's nfnetlink_queue is loaded.
const nfqueueProc = "/proc/net/netfilter/nfnetlink_queue"

// netPreflight checks what kube-proxy, the NetworkPolicy enforcer and
// CoreDNS need from the host: nft and a kernel with nftables, conntrack,
// nfqueue and br_netfilter, no other kube-proxy's or enforcer's table, and
// port 53 free on the bridge address.
func netPreflight(h hostProbe, ownPorts map[int]bool) []string {
	var problems []string
	if _, err := h.lookPath("nft"); err != nil {
		problems = append(problems, "nft is not installed: run hack/install-deps.sh (Debian package nftables); kube-proxy runs in nftables mode")
	} else if out, err := h.nft("--check", "add", "table", "ip", "neuronetes-preflight"); err != nil {
		problems = append(problems, fmt.Sprintf("the kernel refuses nftables (`nft --check add table` failed: %s): kube-proxy's nftables mode needs CONFIG_NF_TABLES", strings.TrimSpace(out)))
	} else if tables, err := h.nft("list", "tables"); err == nil {
		for _, fam := range []string{"ip", "ip6"} {
			if !ownPorts[KubeProxyHealthzPort] && strings.Contains(tables, "table "+fam+" "+kubeProxyTable+"\n") {
				problems = append(problems, fmt.Sprintf("nftables table %s %s exists but this cluster's kube-proxy is not running: another kube-proxy owns it (stop that cluster), or a crashed run left it (run `make cluster-down`)", fam, kubeProxyTable))
			}
		}
		for _, t := range []nftTable{nftQueueTable, xtQueueTable} {
			if !ownPorts[NetpolMetricsPort] && strings.Contains(tables, "table "+t.String()+"\n") {
				problems = append(problems, fmt.Sprintf("nftables table %s exists but this cluster's NetworkPolicy enforcer is not running: another enforcer owns it (stop that cluster), or a crashed run left it (run `make cluster-down`)", t))
			}
		}
	}
	if !h.exists(nfqueueProc) {
		problems = append(problems, "the kernel has no nfqueue ("+nfqueueProc+" is missing): the NetworkPolicy enforcer needs nfnetlink_queue (`modprobe nfnetlink_queue`)")
	}
	if !h.exists("/proc/sys/net/netfilter/nf_conntrack_max") {
		problems = append(problems, "the kernel has no connection tracking (/proc/sys/net/netfilter/nf_conntrack_max is missing): kube-proxy's Service NAT needs nf_conntrack (`modprobe nf_conntrack`)")
	}
	if !h.exists("/proc/sys/" + bridgeNFCall) {
		problems = append(problems, "br_netfilter is not loaded (/proc/sys/"+bridgeNFCall+" is missing): a pod calling a Service whose endpoint is on the same bridge needs it (`modprobe br_netfilter`)")
	}
	if !ownPorts[DNSPort] {
		problems = append(problems, dnsPortProblems(h.readFile)...)
	}
	return problems
}

// socketEntry is one socket of /proc/net/{tcp,udp}[6].
type socketEntry struct {
	ip    net.IP
	port  int
	inode string
}

// procNetFiles are the socket tables that can hold a port-53 listener, with
// the state that means listening (TCP LISTEN, unconnected UDP).
var procNetFiles = []struct {
	path, proto, listenState string
}{
	{"/proc/net/tcp", "tcp", "0A"}, {"/proc/net/tcp6", "tcp", "0A"},
	{"/proc/net/udp", "udp", "07"}, {"/proc/net/udp6", "udp", "07"},
}

func readProcNet(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// dnsPortProblems names every listener that keeps CoreDNS from binding
// NodeIP:53: one on that address or on a wildcard address.
func dnsPortProblems(read func(string) (string, error)) []string {
	var problems []string
	for _, f := range procNetFiles {
		content, err := read(f.path)
		if err != nil {
			continue // no IPv6, for example
		}
		for _, e := range parseProcNet(content, f.listenState) {
			if e.port != DNSPort || !(e.ip.IsUnspecified() || e.ip.Equal(net.ParseIP(NodeIP))) {
				continue
			}
			problems = append(problems, fmt.Sprintf("port %d/%s on %s (CoreDNS, the pods' nameserver) is taken by %s listening on %s: stop it or make it listen elsewhere",
				DNSPort, f.proto, NodeIP, socketOwner(e.inode), net.JoinHostPort(e.ip.String(), strconv.Itoa(e.port))))
		}
	}
	return problems
}

// parseProcNet returns the sockets of a /proc/net/{tcp,udp}[6] table that
// are in state.
func parseProcNet(content, state string) []socketEntry {
	var out []socketEntry
	for i, line := range strings.Split(content, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 10 || f[3] != state {
			continue
		}
		addr, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		ip := procNetIP(addr)
		port, err := strconv.ParseUint(portHex, 16, 16)
		if ip == nil || err != nil {
			continue
		}
		out = append(out, socketEntry{ip: ip, port: int(port), inode: f[9]})
	}
	return out
}

// procNetIP decodes an address of /proc/net: the IPv4 or IPv6 address as
// host-order 32-bit words in hex.
func procNetIP(s string) net.IP {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil
	}
	ip := make(net.IP, len(b))
	for w := 0; w < len(b); w += 4 {
		for i := 0; i < 4; i++ {
			ip[w+i] = b[w+3-i]
		}
	}
	return ip
}

// socketOwner names the process holding a socket inode, or says it is
// unknown.
func socketOwner(inode string) string {
	want := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, pd := range procs {
		pid, err := strconv.Atoi(pd.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", pd.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", pd.Name(), "fd", fd.Name())); l == want {
				comm, _ := os.ReadFile(filepath.Join("/proc", pd.Name(), "comm"))
				return fmt.Sprintf("%s (pid %d)", strings.TrimSpace(string(comm)), pid)
			}
		}
	}
	return "an unknown process (socket inode " + inode + ")"
}
