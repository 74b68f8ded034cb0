package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// netpolEnforcer is the NetworkPolicy enforcer's process and binary name:
// sigs.k8s.io/kube-network-policies (hack/tools/netpol), the enforcer kind
// runs. It sends the first packet of each connection to or from a local pod
// that a NetworkPolicy selects to an nfqueue and accepts or drops it by the
// policies; pods no policy selects, DNS over UDP and packets the host's root
// user sends (the kubelet's probes, the e2e's host processes) are not
// filtered.
const netpolEnforcer = "kube-network-policies"

// netpolTables are the nftables tables (family inet) the enforcer keeps;
// it deletes them when it stops, and cluster-down deletes what a killed one
// left.
var netpolTables = []string{"kube-network-policies", "kube-network-policies-dnscache"}

// netpolQueueID is the nfqueue the enforcer reads. The enforcer runs
// fail-closed (no --fail-open): a packet queued while nothing reads the
// queue is dropped.
const netpolQueueID = 100

// nftQueueRuleset is a ruleset with the nftables queue expression the
// enforcer's rules use; `nft --check` of it fails on kernels without
// nft_queue.
const nftQueueRuleset = `table inet neuronetes-preflight-queue {
	chain c {
		type filter hook postrouting priority 0;
		meta l4proto tcp queue num 100 bypass
	}
}
`

// nftQueueSupported reports whether the kernel accepts nftables queue rules
// (CONFIG_NFT_QUEUE), without changing the ruleset.
func nftQueueSupported() (bool, string) {
	cmd := exec.Command("nft", "--check", "-f", "-")
	cmd.Stdin = strings.NewReader(nftQueueRuleset)
	out, err := cmd.CombinedOutput()
	return err == nil, strings.TrimSpace(string(out))
}

// startNetworkPolicies starts the enforcer with the admin kubeconfig (it
// lists pods, namespaces and NetworkPolicies cluster-wide) and waits until
// its nftables table exists, which it creates on its first sync. On a kernel
// without nftables queue rules it starts nothing and says that
// NetworkPolicies are not enforced: the rest of the cluster works without it.
func startNetworkPolicies(p Paths, logf func(string, ...any)) error {
	if _, ok := runningPid(p, netpolEnforcer); ok {
		return nil
	}
	if ok, msg := nftQueueSupported(); !ok {
		logf("WARNING: NetworkPolicies are NOT enforced: the kernel refuses nftables queue rules (CONFIG_NFT_QUEUE), which %s needs: %s", netpolEnforcer, msg)
		return nil
	}
	if _, err := startProcess(p, netpolEnforcer, nil, p.Binary(netpolEnforcer),
		"--kubeconfig="+p.Kubeconfig,
		"--hostname-override="+NodeName,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(NetpolMetricsPort),
		"--nfqueue-id="+strconv.Itoa(netpolQueueID),
		// Pod IPs come from the apiserver: the local containerd serves no
		// NRI socket to plugins.
		"--disable-nri",
		"--v=1"); err != nil {
		return err
	}
	if err := waitHTTP(p, netpolEnforcer, "http://127.0.0.1:"+strconv.Itoa(NetpolMetricsPort)+"/metrics", nil, 60*time.Second); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		out, _ := exec.CommandContext(ctx, "nft", "list", "tables").Output()
		if strings.Contains(string(out), "table inet "+netpolTables[0]+"\n") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not create nftables table inet %s within 60s: %s", netpolEnforcer, netpolTables[0], logTail(p, netpolEnforcer, 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// isClusterTable reports whether an nftables table ("family name") is one
// the cluster's processes create: kube-proxy's or the enforcer's.
func isClusterTable(family, name string) bool {
	if name == kubeProxyTable {
		return family == "ip" || family == "ip6"
	}
	if family != "inet" {
		return false
	}
	for _, t := range netpolTables {
		if name == t {
			return true
		}
	}
	return false
}

// clusterTablesIn lists the cluster's tables in `nft list tables` output.
func clusterTablesIn(listing string) []string {
	var out []string
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "table" && isClusterTable(f[1], f[2]) {
			out = append(out, f[1]+" "+f[2])
		}
	}
	return out
}
