package egress

import (
	"flag"
	"fmt"
	"strings"
)

// Flags are the command-line form of a Policy, shared by every binary that makes requests to
// user-chosen addresses (chart value egress.*).
type Flags struct {
	allowCIDRs, allowHosts, denyCIDRs string
}

// Register adds --egress-allow-cidrs, --egress-allow-hosts and --egress-cluster-cidrs to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.allowCIDRs, "egress-allow-cidrs", "", "comma-separated CIDRs or addresses that requests to user-chosen URLs (model sources, tool endpoints, webhooks, OIDC issuers) may reach although they are loopback, link-local, private or cluster addresses (default: none)")
	fs.StringVar(&f.allowHosts, "egress-allow-hosts", "", "comma-separated host names (exact, or *.suffix) that requests to user-chosen URLs may reach whatever they resolve to (default: none)")
	fs.StringVar(&f.denyCIDRs, "egress-cluster-cidrs", "", "comma-separated CIDRs of the cluster's pods and Services, denied to user-chosen URLs like private ranges (needed only where they are public addresses)")
}

// Policy returns the policy the flags describe; errors name the flag.
func (f *Flags) Policy() (*Policy, error) {
	allow, err := ParseCIDRs("--egress-allow-cidrs", SplitList(f.allowCIDRs))
	if err != nil {
		return nil, err
	}
	deny, err := ParseCIDRs("--egress-cluster-cidrs", SplitList(f.denyCIDRs))
	if err != nil {
		return nil, err
	}
	hosts := SplitList(f.allowHosts)
	for _, h := range hosts {
		if strings.ContainsAny(h, "/:@ ") || h == "*" || h == "*." {
			return nil, fmt.Errorf("--egress-allow-hosts: %q is not a host name or *.suffix pattern", h)
		}
	}
	return &Policy{AllowCIDRs: allow, AllowHosts: hosts, DenyCIDRs: deny}, nil
}

// SplitList splits a comma-separated flag value, dropping empty items and spaces.
func SplitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
