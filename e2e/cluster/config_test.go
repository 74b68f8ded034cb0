package cluster

import (
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

func TestKubeletConfigPointsPodsAtCoreDNS(t *testing.T) {
	pk, err := ensurePKI(t.TempDir(), componentCerts())
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict([]byte(kubeletConfig(NewPaths("/repo"), pk)), &cfg); err != nil {
		t.Fatalf("kubelet config does not decode strictly: %v", err)
	}
	if len(cfg.ClusterDNS) != 1 || cfg.ClusterDNS[0] != NodeIP || cfg.ClusterDomain != ClusterDomain {
		t.Errorf("clusterDNS %v, clusterDomain %q; want [%s] and %q", cfg.ClusterDNS, cfg.ClusterDomain, NodeIP, ClusterDomain)
	}
	if cfg.MakeIPTablesUtilChains == nil || *cfg.MakeIPTablesUtilChains {
		t.Error("makeIPTablesUtilChains is not false: the kubelet would leave iptables chains on the host")
	}
}

func TestKubeProxyConfigLeavesTheHostAlone(t *testing.T) {
	var cfg struct {
		Mode              string   `json:"mode"`
		ClusterCIDR       string   `json:"clusterCIDR"`
		NodePortAddresses []string `json:"nodePortAddresses"`
		HealthzBind       string   `json:"healthzBindAddress"`
		MetricsBind       string   `json:"metricsBindAddress"`
		OOMScoreAdj       *int     `json:"oomScoreAdj"`
		Conntrack         struct {
			MaxPerCore            *int   `json:"maxPerCore"`
			TCPEstablishedTimeout string `json:"tcpEstablishedTimeout"`
			TCPCloseWaitTimeout   string `json:"tcpCloseWaitTimeout"`
		} `json:"conntrack"`
	}
	if err := yaml.Unmarshal([]byte(kubeProxyConfig("/k.kubeconfig")), &cfg); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"mode nftables", cfg.Mode == "nftables"},
		{"clusterCIDR is the pod range", cfg.ClusterCIDR == PodCIDR},
		{"NodePorts only on the bridge address", len(cfg.NodePortAddresses) == 1 && cfg.NodePortAddresses[0] == NodeIP+"/32"},
		{"healthz and metrics on loopback", strings.HasPrefix(cfg.HealthzBind, "127.0.0.1:") && strings.HasPrefix(cfg.MetricsBind, "127.0.0.1:")},
		{"no OOM score change", cfg.OOMScoreAdj != nil && *cfg.OOMScoreAdj == 0},
		{"no conntrack sysctl", cfg.Conntrack.MaxPerCore != nil && *cfg.Conntrack.MaxPerCore == 0 &&
			cfg.Conntrack.TCPEstablishedTimeout == "0s" && cfg.Conntrack.TCPCloseWaitTimeout == "0s"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("kube-proxy config: want %s; got %+v", c.what, cfg)
		}
	}
}

func TestCorefileServesTheClusterDomainOnTheBridge(t *testing.T) {
	cf := corefile("/k.kubeconfig")
	for _, want := range []string{"bind " + NodeIP, "kubernetes " + ClusterDomain + " in-addr.arpa", "kubeconfig /k.kubeconfig local", "forward . /etc/resolv.conf", "ready 127.0.0.1:"} {
		if !strings.Contains(cf, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, cf)
		}
	}
	// Every directive must be one the build compiles in (hack/tools/k8s/coredns).
	compiled := map[string]bool{"bind": true, "ready": true, "errors": true, "cache": true, "kubernetes": true, "loop": true, "forward": true}
	for _, line := range strings.Split(cf, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(line, "        ") || f[0] == "}" || strings.HasPrefix(f[0], ".:") {
			continue
		}
		if !compiled[f[0]] {
			t.Errorf("Corefile directive %q is not compiled into hack/tools/k8s/coredns", f[0])
		}
	}
}
