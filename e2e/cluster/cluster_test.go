package cluster

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPKIIssuesUsableCertificates(t *testing.T) {
	dir := t.TempDir()
	pk, err := ensurePKI(dir, componentCerts())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(pk.caCert)
	tests := []struct {
		name  string
		usage x509.ExtKeyUsage
		host  string
		org   string
	}{
		{name: "apiserver", usage: x509.ExtKeyUsageServerAuth, host: "127.0.0.1"},
		{name: "apiserver", usage: x509.ExtKeyUsageServerAuth, host: "kubernetes.default.svc"},
		{name: "kubelet-server", usage: x509.ExtKeyUsageServerAuth, host: NodeIP},
		{name: "admin", usage: x509.ExtKeyUsageClientAuth, org: "system:masters"},
		{name: "kubelet-client", usage: x509.ExtKeyUsageClientAuth, org: "system:nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name+"/"+tc.host, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, tc.name+".crt"))
			if err != nil {
				t.Fatal(err)
			}
			blk, _ := pem.Decode(b)
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
				t.Errorf("verify: %v", err)
			}
			if tc.org != "" && (len(cert.Subject.Organization) == 0 || cert.Subject.Organization[0] != tc.org) {
				t.Errorf("organization = %v, want %s", cert.Subject.Organization, tc.org)
			}
		})
	}
	// A second call keeps the existing CA.
	pk2, err := ensurePKI(dir, componentCerts())
	if err != nil {
		t.Fatal(err)
	}
	if !pk2.caCert.Equal(pk.caCert) {
		t.Error("ensurePKI replaced an existing CA")
	}
}

func TestPreflightNamesTheMissingPiece(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	tests := []struct {
		name  string
		ports []portSpec
		own   map[int]bool
		want  string
	}{
		{name: "busy port is named", ports: []portSpec{{"127.0.0.1", busy, "kube-apiserver"}}, want: fmt.Sprintf("port %d (kube-apiserver) is already in use", busy)},
		{name: "own port is fine", ports: []portSpec{{"127.0.0.1", busy, "kube-apiserver"}}, own: map[int]bool{busy: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(busyPorts(tc.ports, tc.own), "\n")
			if tc.want == "" && got != "" {
				t.Errorf("unexpected problems: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problems %q do not contain %q", got, tc.want)
			}
		})
	}
	err = preflight(NewPaths(t.TempDir()), map[int]bool{})
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("preflight on an empty root = %v, want a PreflightError", err)
	}
	if !strings.Contains(err.Error(), "run `make tools`") {
		t.Errorf("missing binaries are not named: %v", err)
	}
}

func TestContainerdConfigEnablesCDI(t *testing.T) {
	cfg := containerdConfig(NewPaths("/repo"))
	for _, want := range []string{"enable_cdi = true", `"/var/run/cdi"`, "restrict_oom_score_adj = true", PauseImage, "SystemdCgroup = false", "/repo/.local/containerd/containerd.sock"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %q", want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/var/lib/kubelet`, "/var/lib/kubelet"},
		{`/a\040b`, "/a b"},
		{`/x\011y`, "/x\ty"},
	}
	for _, tc := range tests {
		if got := unescapeMount(tc.in); got != tc.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
