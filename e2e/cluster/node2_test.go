package cluster

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// TestSecondKubeletConfigIsItsOwn: the second kubelet decodes strictly and shares no port,
// address, runtime socket, log directory or certificate with the first.
func TestSecondKubeletConfigIsItsOwn(t *testing.T) {
	pk, err := ensurePKI(t.TempDir(), append(componentCerts(), secondNodeCerts()...))
	if err != nil {
		t.Fatal(err)
	}
	p := NewPaths("/repo")
	decode := func(n kubeletNode) kubeletv1beta1.KubeletConfiguration {
		var cfg kubeletv1beta1.KubeletConfiguration
		if err := yaml.UnmarshalStrict([]byte(kubeletConfigFor(n, pk)), &cfg); err != nil {
			t.Fatalf("kubelet %s config does not decode strictly: %v", n.name, err)
		}
		return cfg
	}
	one, two := decode(firstNode(p)), decode(secondNode(p))
	if kubeletConfig(p, pk) != kubeletConfigFor(firstNode(p), pk) {
		t.Error("kubeletConfig is not the first node's kubeletConfigFor")
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"serves on SecondNodeIP", two.Address == SecondNodeIP && one.Address == NodeIP},
		{"own healthz port", *two.HealthzPort == SecondKubeletHealthzPort && *one.HealthzPort != *two.HealthzPort},
		{"own containerd", two.ContainerRuntimeEndpoint == "unix://"+secondNodePaths(p).ContainerdSocket() && one.ContainerRuntimeEndpoint != two.ContainerRuntimeEndpoint},
		{"own pod logs", one.PodLogsDir != two.PodLogsDir},
		{"own serving certificate", one.TLSCertFile != two.TLSCertFile},
		{"pods' nameserver is CoreDNS on the bridge", len(two.ClusterDNS) == 1 && two.ClusterDNS[0] == NodeIP},
		{"registers tainted neuronetes.io/second-node:NoSchedule, the first node untainted", len(two.RegisterWithTaints) == 1 &&
			two.RegisterWithTaints[0].Key == SecondNodeLabel && two.RegisterWithTaints[0].Effect == "NoSchedule" && len(one.RegisterWithTaints) == 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("second kubelet: want %s", c.what)
		}
	}
	if a, b := firstNode(p), secondNode(p); a.rootDir == b.rootDir || a.proc == b.proc || a.clientCert == b.clientCert || strings.Contains(b.labels, "gpu-node") {
		t.Errorf("second node %+v shares root dir, process name or client certificate with %+v, or carries the gpu-node label", b, a)
	}
	// The Node authorizer admits the kubelet whose client CN is system:node:<its node name>.
	b, err := os.ReadFile(pk.path(secondNode(p).clientCert + ".crt"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:"+SecondNodeName || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:nodes" {
		t.Errorf("second kubelet client certificate subject %v", cert.Subject)
	}
}

// TestSecondContainerdIsItsOwn: root, state, sockets and CNI directory differ from the first
// containerd's, and NRI (a host-wide socket) is off.
func TestSecondContainerdIsItsOwn(t *testing.T) {
	p := NewPaths("/repo")
	q := secondNodePaths(p)
	one, two := containerdConfig(p), secondContainerdConfig(q)
	for _, s := range []string{q.Containerd + "/root", q.Containerd + "/state", q.ContainerdSocket(), q.ContainerdSocket() + ".ttrpc", q.CNIConf} {
		if !strings.Contains(two, `"`+s+`"`) || strings.Contains(one, `"`+s+`"`) {
			t.Errorf("second containerd config: %s must be in it and not in the first's", s)
		}
	}
	if !strings.Contains(two, "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true") || strings.Contains(one, "nri") {
		t.Errorf("NRI must be off in the second containerd only:\n%s", two)
	}
	if q.Run != p.Run || q.Logs != p.Logs || q.Bin != p.Bin {
		t.Error("the second node's processes must keep their pid files and logs with the cluster's")
	}
}

// TestNodePodRangesAreDisjoint: each node's host-local range lies in PodCIDR, the ranges do not
// overlap, neither holds a node address, and each node keeps its own IPAM data directory.
func TestNodePodRangesAreDisjoint(t *testing.T) {
	type ipam struct {
		Ranges  [][]struct{ Subnet, RangeStart, RangeEnd, Gateway string }
		DataDir string
	}
	parse := func(conf string) ipam {
		var doc struct {
			Plugins []struct {
				Type string
				IPAM ipam `json:"ipam"`
			}
		}
		if err := json.Unmarshal([]byte(conf), &doc); err != nil || len(doc.Plugins) == 0 || len(doc.Plugins[0].IPAM.Ranges) != 1 {
			t.Fatalf("CNI config does not parse (%v):\n%s", err, conf)
		}
		return doc.Plugins[0].IPAM
	}
	one, two := parse(cniConfig(firstNodePodRange, "/a")), parse(cniConfig(secondNodePodRange, "/b"))
	_, cidr, _ := net.ParseCIDR(PodCIDR)
	num := func(s string) uint32 {
		ip := net.ParseIP(s).To4()
		if ip == nil || !cidr.Contains(ip) {
			t.Fatalf("%q is not an address in %s", s, PodCIDR)
		}
		return uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	}
	r1, r2 := one.Ranges[0][0], two.Ranges[0][0]
	for _, r := range []struct{ Subnet, RangeStart, RangeEnd, Gateway string }{r1, r2} {
		if r.Subnet != PodCIDR || r.Gateway != NodeIP || num(r.RangeStart) > num(r.RangeEnd) {
			t.Errorf("range %+v: want subnet %s, gateway %s, start <= end", r, PodCIDR, NodeIP)
		}
		for _, node := range []string{NodeIP, SecondNodeIP} {
			if n := num(node); n >= num(r.RangeStart) && n <= num(r.RangeEnd) {
				t.Errorf("range %+v holds node address %s", r, node)
			}
		}
	}
	if num(r1.RangeEnd) >= num(r2.RangeStart) {
		t.Errorf("ranges overlap: %+v and %+v", r1, r2)
	}
	if one.DataDir == two.DataDir {
		t.Error("both nodes share one host-local data directory")
	}
}

func TestRealNodesFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
		err  bool
	}{{"", 1, false}, {"1", 1, false}, {"2", 2, false}, {"3", 0, true}, {"0", 0, true}, {"two", 0, true}} {
		t.Setenv(RealNodesEnv, tc.env)
		got, err := RealNodesFromEnv()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s=%q: got %d, %v; want %d, error %v", RealNodesEnv, tc.env, got, err, tc.want, tc.err)
		}
	}
}

func TestBinaryOfSecondNodeProcesses(t *testing.T) {
	for name, want := range map[string]string{secondKubelet: "kubelet", secondContainerd: "containerd", "kubelet": "kubelet", "kwok-1": "kwok"} {
		if got := binaryOf(name); got != want {
			t.Errorf("binaryOf(%q) = %q, want %q", name, got, want)
		}
	}
}
