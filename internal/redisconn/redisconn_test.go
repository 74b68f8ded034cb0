package redisconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func ping(t *testing.T, addr string, f Flags) error {
	t.Helper()
	o := &redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second}
	if err := f.Apply(o); err != nil {
		return err
	}
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// TestFlagsRegisterAndValidate parses the shared flags and refuses
// inconsistent ones, naming them.
func TestFlagsRegisterAndValidate(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--redis-username=gw", "--redis-password-file=/p", "--redis-tls", "--redis-ca-file=/ca", "--redis-server-name=r"}, ""},
		{[]string{"--redis-tls", "--redis-cert-file=/c"}, "--redis-cert-file and --redis-key-file"},
		{[]string{"--redis-ca-file=/ca"}, "need --redis-tls"},
	} {
		var f Flags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := f.Validate()
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: Validate = %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestApplyAuthenticates connects to a Redis whose default user is off, as
// an ACL user whose password comes from a file or the environment.
func TestApplyAuthenticates(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--user", "gw", "on", ">s3cret", "~nn:gw:*", "+ping", "--user", "default", "off"}})
	good, bad := writeFile(t, "pw", "s3cret\n"), writeFile(t, "bad", "nope")
	for _, tc := range []struct {
		name    string
		f       Flags
		env     string
		wantErr string
	}{
		{"user and password file", Flags{Username: "gw", PasswordFile: good}, "", ""},
		{"password from the environment", Flags{Username: "gw"}, "s3cret", ""},
		{"wrong password", Flags{Username: "gw", PasswordFile: bad}, "", "WRONGPASS"},
		{"no credentials", Flags{}, "", "NOAUTH"},
		{"missing password file", Flags{Username: "gw", PasswordFile: "/nonexistent"}, "", "--redis-password-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(PasswordEnv, tc.env)
			err := ping(t, srv.Addr, tc.f)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("PING = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestApplyTLS connects over TLS to a Redis serving a certificate of a test
// CA: it verifies against --redis-ca-file, and fails against the system roots
// or a server name the certificate does not carry.
func TestApplyTLS(t *testing.T) {
	caPEM, certPEM, keyPEM := testCerts(t)
	srv := redistest.Start(t, redistest.Options{TLSCertFile: writeFile(t, "srv.crt", certPEM), TLSKeyFile: writeFile(t, "srv.key", keyPEM)})
	ca := writeFile(t, "ca.crt", caPEM)
	for _, tc := range []struct {
		name    string
		f       Flags
		wantErr string
	}{
		{"CA file", Flags{TLS: true, CAFile: ca}, ""},
		{"system roots", Flags{TLS: true}, "certificate"},
		{"other server name", Flags{TLS: true, CAFile: ca, ServerName: "redis.elsewhere"}, "certificate"},
		{"not PEM", Flags{TLS: true, CAFile: writeFile(t, "x", "x")}, "no PEM certificates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ping(t, srv.TLSAddr, tc.f)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("PING = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// testCerts returns a CA and a server certificate for 127.0.0.1 it signed (PEM).
func testCerts(t *testing.T) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return enc("CERTIFICATE", caDER), enc("CERTIFICATE", srvDER), enc("EC PRIVATE KEY", keyDER)
}
