package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// hostNet is the part of the host's network state that the cluster changes:
// nftables (kube-proxy's table; iptables-nft chains would show here too) and
// the IPv4 routes (the bridge's and the Service route).
type hostNet struct {
	// Tables lists nftables tables as "family name".
	Tables []string `json:"nftTables"`
	// Chains lists nftables chains as "family table chain".
	Chains []string `json:"nftChains"`
	// Routes lists the main table's IPv4 routes as `ip -4 route show` prints them.
	Routes []string `json:"routes"`
}

// snapshotNet reads the host's network state.
func snapshotNet() (hostNet, error) {
	var n hostNet
	tables, err := exec.Command("nft", "-j", "list", "tables").Output()
	if err != nil {
		return n, fmt.Errorf("nft -j list tables: %w", commandError(err))
	}
	chains, err := exec.Command("nft", "-j", "list", "chains").Output()
	if err != nil {
		return n, fmt.Errorf("nft -j list chains: %w", commandError(err))
	}
	if n.Tables, n.Chains, err = parseNFT(tables, chains); err != nil {
		return n, err
	}
	routes, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return n, fmt.Errorf("ip -4 route show: %w", commandError(err))
	}
	n.Routes = parseLines(string(routes))
	return n, nil
}

// commandError adds a failed command's stderr to its error.
func commandError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// nftJSON is the part of `nft -j list tables|chains` this package reads.
type nftJSON struct {
	Nftables []struct {
		Table *struct {
			Family string `json:"family"`
			Name   string `json:"name"`
		} `json:"table"`
		Chain *struct {
			Family string `json:"family"`
			Table  string `json:"table"`
			Name   string `json:"name"`
		} `json:"chain"`
	} `json:"nftables"`
}

// parseNFT turns nft's JSON listings into sorted "family name" tables and
// "family table chain" chains.
func parseNFT(tablesJSON, chainsJSON []byte) (tables, chains []string, err error) {
	var t, c nftJSON
	if err := json.Unmarshal(tablesJSON, &t); err != nil {
		return nil, nil, fmt.Errorf("parsing nft table list: %w", err)
	}
	if err := json.Unmarshal(chainsJSON, &c); err != nil {
		return nil, nil, fmt.Errorf("parsing nft chain list: %w", err)
	}
	for _, o := range t.Nftables {
		if o.Table != nil {
			tables = append(tables, o.Table.Family+" "+o.Table.Name)
		}
	}
	for _, o := range c.Nftables {
		if o.Chain != nil {
			chains = append(chains, o.Chain.Family+" "+o.Chain.Table+" "+o.Chain.Name)
		}
	}
	sort.Strings(tables)
	sort.Strings(chains)
	return tables, chains, nil
}

// parseLines returns the non-empty lines of s, trimmed and sorted.
func parseLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// diffNet describes every difference between the recorded and the current
// network state: what the cluster left behind, and what it removed.
func diffNet(recorded, now hostNet) []string {
	var out []string
	add := func(kind string, before, after []string) {
		added, removed := diffSets(before, after)
		for _, x := range added {
			out = append(out, fmt.Sprintf("%s %q (not there before cluster-up)", kind, x))
		}
		for _, x := range removed {
			out = append(out, fmt.Sprintf("%s %q is gone (it was there before cluster-up)", kind, x))
		}
	}
	add("nftables table", recorded.Tables, now.Tables)
	add("nftables chain", recorded.Chains, now.Chains)
	add("route", recorded.Routes, now.Routes)
	return out
}

// diffSets returns the elements only in after and only in before.
func diffSets(before, after []string) (added, removed []string) {
	b, a := map[string]bool{}, map[string]bool{}
	for _, x := range before {
		b[x] = true
	}
	for _, x := range after {
		a[x] = true
		if !b[x] {
			added = append(added, x)
		}
	}
	for _, x := range before {
		if !a[x] {
			removed = append(removed, x)
		}
	}
	return added, removed
}

// serviceRoute is the route that sends the host's traffic for ClusterIPs
// through the bridge with the node address as source, so Services answer
// host clients the way they answer pods (kube-proxy translates it).
func serviceRoute() []string {
	return []string{ServiceCIDR, "dev", BridgeName, "src", NodeIP}
}

// ensureServiceRoute adds the Service route when it is missing.
func ensureServiceRoute() error {
	out, err := exec.Command("ip", "-4", "route", "show", ServiceCIDR).Output()
	if err == nil && strings.Contains(string(out), "dev "+BridgeName) {
		return nil
	}
	args := append([]string{"route", "replace"}, serviceRoute()...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// removeClusterNet deletes what kube-proxy and Up added to the host's
// network and that the recorded state did not have: kube-proxy's and the
// NetworkPolicy enforcer's nftables tables and the Service route. It runs
// after both have stopped.
func removeClusterNet(recorded *hostState, logf func(string, ...any)) []error {
	var errs []error
	now, err := snapshotNet()
	if err != nil {
		return []error{err}
	}
	was := map[string]bool{}
	if recorded != nil {
		for _, t := range recorded.Net.Tables {
			was[t] = true
		}
	}
	for _, t := range now.Tables {
		f := strings.Fields(t)
		if len(f) != 2 || !IsClusterTable(f[0], f[1]) || was[t] {
			continue
		}
		if out, err := exec.Command("nft", "delete", "table", f[0], f[1]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete table %s: %v: %s", t, err, out))
		} else {
			logf("removed nftables table %s", t)
		}
	}
	if out, _ := exec.Command("ip", "-4", "route", "show", ServiceCIDR).Output(); strings.Contains(string(out), "dev "+BridgeName) {
		if out, err := exec.Command("ip", "route", "del", ServiceCIDR, "dev", BridgeName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip route del %s: %v: %s", ServiceCIDR, err, out))
		} else {
			logf("removed route %s", ServiceCIDR)
		}
	}
	return errs
}

// HostChanges lists how the host's network differs from the state recorded
// before Up: while the cluster runs, what it added (kube-proxy's tables and
// chains, the bridge routes); after Down, nothing.
func HostChanges(root string) ([]string, error) {
	st, err := loadHostState(NewPaths(root))
	if err != nil {
		return nil, fmt.Errorf("loading the recorded host state: %w", err)
	}
	if !st.NetRecorded {
		return nil, fmt.Errorf("%s has no network state (written before the cluster recorded it)", statePath(NewPaths(root)))
	}
	now, err := snapshotNet()
	if err != nil {
		return nil, err
	}
	return diffNet(st.Net, now), nil
}
