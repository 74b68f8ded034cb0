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

// nftTable is an nftables table: family and name.
type nftTable struct{ family, name string }

func (t nftTable) String() string { return t.family + " " + t.name }

// netpolTables are the nftables tables the enforcer keeps: the upstream
// ones (family inet) and the xt-queue dataplane's (family ip,
// hack/tools/netpol/xtqueue.go). It deletes them when it stops, and
// cluster-down deletes what a killed one left.
var netpolTables = []nftTable{nftQueueTable, {"inet", "kube-network-policies-dnscache"}, xtQueueTable}

// nftQueueTable and xtQueueTable are the tables the enforcer creates first
// with each dataplane: nftables (upstream's rules) and xt-queue.
var (
	nftQueueTable = nftTable{"inet", "kube-network-policies"}
	xtQueueTable  = nftTable{"ip", "kube-network-policies-xt"}
)

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
// without nftables queue rules (CONFIG_NFT_QUEUE) the enforcer queues
// packets through the xtables NFQUEUE target instead (--dataplane=xt-queue,
// which needs CONFIG_NFT_COMPAT and CONFIG_NETFILTER_XT_TARGET_NFQUEUE); a
// kernel with neither fails the start with what is missing.
func startNetworkPolicies(p Paths, logf func(string, ...any)) error {
	if _, ok := runningPid(p, netpolEnforcer); ok {
		return nil
	}
	dataplane, table := "nftables", nftQueueTable
	if ok, msg := nftQueueSupported(); !ok {
		dataplane, table = "xt-queue", xtQueueTable
		logf("the kernel refuses nftables queue rules (%s): %s queues through the xtables NFQUEUE target (nft_compat)", msg, netpolEnforcer)
	}
	if _, err := startProcess(p, netpolEnforcer, nil, p.Binary(netpolEnforcer),
		"--dataplane="+dataplane,
		"--kubeconfig="+p.Kubeconfig,
		"--hostname-override="+NodeName,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(NetpolMetricsPort),
		"--nfqueue-id="+strconv.Itoa(netpolQueueID),
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
		if strings.Contains(string(out), "table "+table.String()+"\n") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s (--dataplane=%s) did not create nftables table %s within 60s (the xt-queue dataplane needs CONFIG_NFT_COMPAT and CONFIG_NETFILTER_XT_TARGET_NFQUEUE): %s", netpolEnforcer, dataplane, table, logTail(p, netpolEnforcer, 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// IsClusterTable reports whether an nftables table (family, name) is one
// the cluster's processes create, kube-proxy's or the enforcer's, and so one
// cluster-down removes.
func IsClusterTable(family, name string) bool {
	if name == kubeProxyTable {
		return family == "ip" || family == "ip6"
	}
	for _, t := range netpolTables {
		if family == t.family && name == t.name {
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
		if len(f) == 3 && f[0] == "table" && IsClusterTable(f[1], f[2]) {
			out = append(out, f[1]+" "+f[2])
		}
	}
	return out
}
