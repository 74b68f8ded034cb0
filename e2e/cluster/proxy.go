package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// kubeProxyTable is the nftables table kube-proxy keeps, in the ip and ip6
// families; cluster-down deletes both.
const kubeProxyTable = "kube-proxy"

// kubeProxyConfig is kube-proxy's configuration. nftables mode: the kernel
// and Debian 12's nft (1.0.6, kube-proxy needs 1.0.1+) support it, it keeps
// every rule in its own table (one `nft delete table` restores the host), and
// it is the mode Kubernetes develops. It changes no sysctl: conntrack sizing
// and timeouts are left to the host (0 = leave alone) and the OOM score is
// not adjusted. NodePorts open only on the bridge address, never on the
// host's other interfaces.
func kubeProxyConfig(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: nftables
hostnameOverride: %s
clusterCIDR: %s
detectLocalMode: ClusterCIDR
nodePortAddresses: ["%s/32"]
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
nftables:
  minSyncPeriod: 1s
  syncPeriod: 30s
`, kubeconfig, NodeName, PodCIDR, NodeIP, KubeProxyHealthzPort, KubeProxyMetricsPort)
}

// startKubeProxy starts kube-proxy and waits until its healthz answers,
// which it does after its first full sync of the rules.
func startKubeProxy(p Paths, pk *pki) error {
	if _, ok := runningPid(p, "kube-proxy"); ok {
		return nil
	}
	kc := filepath.Join(p.Local, "kubeconfigs", "kube-proxy.kubeconfig")
	if err := writeKubeconfig(kc, pk, "kube-proxy", apiServerURL()); err != nil {
		return err
	}
	dir := filepath.Join(p.Local, "kube-proxy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(kubeProxyConfig(kc)), 0o644); err != nil {
		return fmt.Errorf("writing kube-proxy config: %w", err)
	}
	if _, err := startProcess(p, "kube-proxy", nil, p.Binary("kube-proxy"), "--config="+cfg, "--v=1"); err != nil {
		return err
	}
	return waitHTTP(p, "kube-proxy", "http://127.0.0.1:"+strconv.Itoa(KubeProxyHealthzPort)+"/healthz", nil, 60*time.Second)
}
