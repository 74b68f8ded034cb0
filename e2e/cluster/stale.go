package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// tableOwner is the binary whose running process keeps a cluster nftables
// table; kube-proxy's tables in both families, the enforcer's tables.
func tableOwner(name string) string {
	if name == kubeProxyTable {
		return "kube-proxy"
	}
	return netpolEnforcer
}

// runningBinaries returns the base names of every running process's
// executable on the machine (any checkout's cluster included).
func runningBinaries() map[string]bool {
	out := map[string]bool{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil {
			out[filepath.Base(strings.TrimSuffix(exe, " (deleted)"))] = true
		}
	}
	return out
}

// staleTables lists the cluster's nftables tables in an `nft list tables`
// listing whose owner runs nowhere on the machine: a killed run (of this
// checkout or another one) left them, and no process will ever update them.
func staleTables(listing string, running map[string]bool) []string {
	var out []string
	for _, t := range clusterTablesIn(listing) {
		f := strings.Fields(t)
		if !running[tableOwner(f[1])] {
			out = append(out, t)
		}
	}
	return out
}

// clearStaleTables deletes the cluster tables that a killed run left, so a
// new cluster starts on a clean host instead of failing its preflight; a
// table whose owner still runs belongs to a live cluster and is kept (the
// preflight then names it).
func clearStaleTables(h hostProbe, running map[string]bool, logf func(string, ...any)) error {
	listing, err := h.nft("list", "tables")
	if err != nil {
		return nil // netPreflight reports an unusable nft
	}
	for _, t := range staleTables(listing, running) {
		f := strings.Fields(t)
		if out, err := h.nft("delete", "table", f[0], f[1]); err != nil {
			return fmt.Errorf("deleting nftables table %s that a killed run left: %v: %s", t, err, strings.TrimSpace(out))
		}
		logf("removed nftables table %s: a killed run left it (no %s runs)", t, tableOwner(f[1]))
	}
	return nil
}

// clearStaleBridge deletes the cluster's bridge (and with it the pod and
// Service routes on it) when no kubelet runs on the machine: a killed run
// left it, and a recorded host state that contained it would make the next
// cluster-down report the routes as lost.
func clearStaleBridge(running map[string]bool, logf func(string, ...any)) error {
	if running["kubelet"] {
		return nil
	}
	if err := exec.Command("ip", "link", "show", BridgeName).Run(); err != nil {
		return nil // no bridge
	}
	if out, err := exec.Command("ip", "link", "del", BridgeName).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting bridge %s that a killed run left: %v: %s", BridgeName, err, strings.TrimSpace(string(out)))
	}
	logf("removed bridge %s: a killed run left it (no kubelet runs)", BridgeName)
	return nil
}
