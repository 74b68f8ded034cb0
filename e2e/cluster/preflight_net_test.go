package cluster

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func TestProcNetIP(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0100007F", "127.0.0.1"},
		{"0100580A", "10.88.0.1"},
		{"00000000", "0.0.0.0"},
		{"00000000000000000000000000000000", "::"},
		{"00000000000000000000000001000000", "::1"},
		{"xyz", "<nil>"},
	}
	for _, tc := range tests {
		if got := procNetIP(tc.in).String(); got != tc.want {
			t.Errorf("procNetIP(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// procNet renders a /proc/net table with one socket per (address, port, state).
func procNet(rows ...string) string {
	out := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	for _, r := range rows {
		f := strings.Fields(r) // local state inode
		out += "   0: " + f[0] + " 00000000:0000 " + f[1] + " 00000000:00000000 00:00000000 00000000     0        0 " + f[2] + " 1 0000000000000000 100 0 0 10 0\n"
	}
	return out
}

func TestDNSPortProblems(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{name: "free", files: map[string]string{"/proc/net/udp": procNet("0100007F:0035 07 11", "0100580A:0036 07 12")}},
		{name: "resolver on loopback only", files: map[string]string{"/proc/net/tcp": procNet("3500007F:0035 0A 13")}},
		{name: "udp on the bridge address", files: map[string]string{"/proc/net/udp": procNet("0100580A:0035 07 14")},
			want: []string{"port 53/udp on 10.88.0.1", "listening on 10.88.0.1:53"}},
		{name: "tcp wildcard", files: map[string]string{"/proc/net/tcp": procNet("00000000:0035 0A 15")},
			want: []string{"port 53/tcp", "listening on 0.0.0.0:53"}},
		{name: "tcp connection, not a listener", files: map[string]string{"/proc/net/tcp": procNet("0100580A:0035 01 16")}},
		{name: "ipv6 wildcard", files: map[string]string{"/proc/net/udp6": procNet("00000000000000000000000000000000:0035 07 17")},
			want: []string{"listening on [::]:53"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			read := func(path string) (string, error) {
				if c, ok := tc.files[path]; ok {
					return c, nil
				}
				return "", errors.New("absent")
			}
			got := strings.Join(dnsPortProblems(read), "\n")
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("unexpected problems: %s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems %q lack %q", got, w)
				}
			}
		})
	}
}

func TestDNSPortProblemsSeesARealListener(t *testing.T) {
	// A real socket on port 0 is never 53, so check the parser on the live
	// table instead: the test's own listener must show up with its port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	content, err := readProcNet("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range parseProcNet(content, "0A") {
		if e.port == port && e.ip.Equal(net.ParseIP("127.0.0.1")) {
			if owner := socketOwner(e.inode); !strings.Contains(owner, "pid") {
				t.Errorf("socketOwner(%s) = %q, want this process named", e.inode, owner)
			}
			return
		}
	}
	t.Errorf("listener 127.0.0.1:%d not found in /proc/net/tcp", port)
}

func TestNetPreflightNamesTheMissingPiece(t *testing.T) {
	good := func() hostProbe {
		return hostProbe{
			lookPath: func(string) (string, error) { return "/usr/sbin/nft", nil },
			nft:      func(args ...string) (string, error) { return "table inet filter\n", nil },
			exists:   func(string) bool { return true },
			readFile: func(string) (string, error) { return procNet(), nil },
		}
	}
	tests := []struct {
		name   string
		change func(*hostProbe)
		own    map[int]bool
		want   string
	}{
		{name: "healthy host"},
		{name: "nft missing", change: func(h *hostProbe) {
			h.lookPath = func(string) (string, error) { return "", errors.New("not found") }
		}, want: "Debian package nftables"},
		{name: "kernel without nftables", change: func(h *hostProbe) {
			h.nft = func(...string) (string, error) {
				return "Error: Could not process rule: Operation not supported", errors.New("exit 1")
			}
		}, want: "CONFIG_NF_TABLES"},
		{name: "another kube-proxy's table", change: func(h *hostProbe) {
			h.nft = func(...string) (string, error) { return "table ip kube-proxy\ntable ip6 kube-proxy\n", nil }
		}, want: "nftables table ip kube-proxy exists"},
		{name: "our own kube-proxy's table", change: func(h *hostProbe) {
			h.nft = func(...string) (string, error) { return "table ip kube-proxy\n", nil }
		}, own: map[int]bool{KubeProxyHealthzPort: true}},
		{name: "another enforcer's table", change: func(h *hostProbe) {
			h.nft = func(...string) (string, error) { return "table inet kube-network-policies\n", nil }
		}, own: map[int]bool{KubeProxyHealthzPort: true}, want: "nftables table inet kube-network-policies exists"},
		{name: "our own enforcer's table", change: func(h *hostProbe) {
			h.nft = func(...string) (string, error) { return "table inet kube-network-policies\n", nil }
		}, own: map[int]bool{NetpolMetricsPort: true}},
		{name: "no nfqueue", change: func(h *hostProbe) {
			h.exists = func(p string) bool { return !strings.Contains(p, "nfnetlink_queue") }
		}, want: "nfnetlink_queue"},
		{name: "no conntrack", change: func(h *hostProbe) {
			h.exists = func(p string) bool { return !strings.Contains(p, "nf_conntrack") }
		}, want: "nf_conntrack"},
		{name: "no br_netfilter", change: func(h *hostProbe) {
			h.exists = func(p string) bool { return !strings.Contains(p, "bridge") }
		}, want: "br_netfilter is not loaded"},
		{name: "port 53 taken on the bridge address", change: func(h *hostProbe) {
			h.readFile = func(p string) (string, error) { return procNet("0100580A:0035 07 99"), nil }
		}, want: "port 53/udp on 10.88.0.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			if tc.change != nil {
				tc.change(&h)
			}
			own := tc.own
			if own == nil {
				own = map[int]bool{}
			}
			got := strings.Join(netPreflight(h, own), "\n")
			if tc.want == "" && got != "" {
				t.Fatalf("unexpected problems:\n%s", got)
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("problems %q do not name %q", got, tc.want)
			}
		})
	}
}
