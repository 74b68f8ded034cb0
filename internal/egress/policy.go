// Package egress is the one policy every server-side request to a user-chosen address goes
// through: Model sources (HTTP(S), S3), ToolBinding endpoints, guardrail webhooks and Presidio,
// the rollout classifier, Tenant OIDC issuers and JWKS URIs.
//
// A Policy denies loopback, link-local (169.254.169.254 included), private (RFC 1918, ULA),
// shared (100.64.0.0/10), unspecified, multicast, reserved and the cluster's own ranges unless
// an admin allowlist names the address (AllowCIDRs) or the host name (AllowHosts). The check runs
// in the dialer on the address actually connected to, after DNS resolution, so a name that
// resolves to a denied address, a DNS rebinding between a check and the dial, and a redirect to a
// denied address are all refused the same way. Clients built here also bound every request with
// connect, TLS-handshake and response-header timeouts and cap redirects.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrDenied is wrapped by every refusal of the policy (errors.Is(err, ErrDenied)).
var ErrDenied = errors.New("egress denied")

// DeniedError is a refused connection: the address, the host name it was reached by, and why.
type DeniedError struct {
	// Host is the name the caller asked for ("" when unknown).
	Host string
	// Addr is the IP address the connection would have gone to.
	Addr netip.Addr
	// Reason names the denied range ("loopback", "link-local", ...).
	Reason string
}

// Error names the address and the admin settings that would admit it.
func (e *DeniedError) Error() string {
	host := ""
	if e.Host != "" && e.Host != e.Addr.String() {
		host = fmt.Sprintf(" (host %q)", e.Host)
	}
	return fmt.Sprintf("egress denied: %s%s is a %s address; an admin admits it with egress.allowCIDRs (--egress-allow-cidrs) or the host name with egress.allowHosts (--egress-allow-hosts)",
		e.Addr, host, e.Reason)
}

// Unwrap makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Unwrap() error { return ErrDenied }

// deniedRanges are refused unless allowed, each with the reason reported. Ranges netip's
// predicates already cover (loopback, link-local, private, multicast, unspecified) are checked
// by those; these are the others.
var deniedRanges = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (\"this network\")"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
}

// Policy decides which addresses a client may connect to. The zero Policy, and a nil *Policy,
// deny every non-public address.
type Policy struct {
	// AllowCIDRs admit addresses that would otherwise be denied.
	AllowCIDRs []netip.Prefix
	// AllowHosts admit host names whatever they resolve to: an exact name ("minio.storage.svc")
	// or a suffix pattern ("*.svc.cluster.local"). Names compare case-insensitively without a
	// trailing dot.
	AllowHosts []string
	// DenyCIDRs are denied besides the built-in ranges: the cluster's pod and Service ranges
	// when they are public addresses.
	DenyCIDRs []netip.Prefix
}

// HostAllowed reports whether host (a name or an IP literal, no port) is named by AllowHosts.
func (p *Policy) HostAllowed(host string) bool {
	if p == nil {
		return false
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	for _, a := range p.AllowHosts {
		a = strings.ToLower(strings.TrimSuffix(a, "."))
		if suffix, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(h, "."+suffix) {
				return true
			}
		} else if h == a {
			return true
		}
	}
	return false
}

// CheckAddr returns a *DeniedError when a is denied; host is only used in the message.
func (p *Policy) CheckAddr(host string, a netip.Addr) error {
	if p == nil {
		p = &Policy{}
	}
	a = a.Unmap()
	for _, c := range p.AllowCIDRs {
		if c.Contains(a) {
			return nil
		}
	}
	if reason := deniedReason(a, p.DenyCIDRs); reason != "" {
		return &DeniedError{Host: host, Addr: a, Reason: reason}
	}
	return nil
}

func deniedReason(a netip.Addr, extra []netip.Prefix) string {
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsPrivate():
		return "private"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	}
	for _, r := range deniedRanges {
		if r.p.Contains(a) {
			return r.reason
		}
	}
	if slices.ContainsFunc(extra, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return "cluster (egress.clusterCIDRs)"
	}
	return ""
}

// CheckURLHost refuses host (a URL's host without port) early when it is an IP literal the
// policy denies. Names are checked when they are dialed.
func (p *Policy) CheckURLHost(host string) error {
	if p.HostAllowed(host) {
		return nil
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return nil
	}
	return p.CheckAddr(host, a)
}

// Dialer returns a DialContext that connects only where the policy admits: a host named by
// AllowHosts is dialed as is; any other host is resolved and each address it would connect to
// is checked in the dialer's Control hook, so the check sees the address actually used.
func (p *Policy) Dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	open := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("egress: dial %q: %w", addr, err)
		}
		if p.HostAllowed(host) {
			return open.DialContext(ctx, network, addr)
		}
		d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second,
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("egress: dial address %q: %w", address, err)
				}
				return p.CheckAddr(host, ap.Addr())
			}}
		return d.DialContext(ctx, network, addr)
	}
}

// ParseCIDRs parses a list of CIDRs or single addresses (a single address is its /32 or /128);
// errors name the flag or value given as field.
func ParseCIDRs(field string, vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if pr, err := netip.ParsePrefix(v); err == nil {
			out = append(out, pr.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is neither a CIDR nor an IP address", field, v)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// AllowLoopback returns a policy that admits loopback addresses only (127.0.0.0/8, ::1): tests
// with local servers and the local cluster's host-network components.
func AllowLoopback() *Policy {
	return &Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
}
