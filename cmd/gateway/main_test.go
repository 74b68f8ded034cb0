package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, args ...string) (*options, error) {
	t.Helper()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	o := &options{}
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.validate()
}

// Every invalid flag is reported with its name; defaults follow the mode.
func TestOptionsValidate(t *testing.T) {
	o, err := parse(t, "--backends=127.0.0.1:8001")
	if err != nil || o.auth != "none" || o.mode() != "static-backends" {
		t.Fatalf("static defaults: %v %+v", err, o)
	}
	o, err = parse(t)
	if err != nil || o.auth != "required" || o.mode() != "kubernetes" {
		t.Fatalf("kubernetes defaults: %v", err)
	}
	if o, err = parse(t, "--auth=none", "--anonymous-namespace=demo"); err != nil || o.anonNS != "demo" {
		t.Fatalf("anonymous namespace: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backends=127.0.0.1:8001", "--auth=required"}, "--auth=required needs Kubernetes"},
		{[]string{"--auth=maybe"}, "--auth must be"},
		{[]string{"--auth=none"}, "needs --anonymous-namespace"},
		{[]string{"--auth=none", "--anonymous-namespace=Not_A_NS"}, "--anonymous-namespace \"Not_A_NS\""},
		{[]string{"--anonymous-namespace=demo"}, "--anonymous-namespace applies only with --auth=none"},
		{[]string{"--backends=127.0.0.1:8001", "--anonymous-namespace=demo"}, "--anonymous-namespace applies only"},
		{[]string{"--backends=https://a:1"}, "--backends"},
		{[]string{"--quota-store-failure=later"}, "--quota-store-failure"},
		{[]string{"--blocked-answer=403"}, "--blocked-answer"},
		{[]string{"--tls-cert-file=/x"}, "--tls-cert-file and --tls-key-file"},
		{[]string{"--session-keys=cookie:x"}, "--session-keys"},
		{[]string{"--scorer-weights=speed=1"}, "--scorer-weights"},
		{[]string{"--load-factor=-1"}, "--load-factor"},
		{[]string{"--max-inflight-per-endpoint=0"}, "--max-inflight-per-endpoint"},
		{[]string{"--max-queue=-1"}, "--max-queue"},
		{[]string{"--pick-strategy=random"}, "--pick-strategy"},
		{[]string{"--kv-events-hash=sha256_cbor"}, "--kv-events-hash"},
		{[]string{"--redis-password-file=/nonexistent/pw"}, "--redis-password-file"},
		{[]string{"--redis-addr=127.0.0.1:6379"}, "--session-key-file is required with --redis-addr"},
	} {
		_, err := parse(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	o, _ = parse(t, "--backends=127.0.0.1:8001", "--scorer-weights=prefill=2", "--pin-ttl=5m")
	p, _ := o.defaultPolicy()
	if p.Weights.Prefill != 2 || p.Weights.Queue != 1 || p.PinTTL != 5*time.Minute {
		t.Fatalf("policy from flags %+v", p)
	}
}

func writeCert(t *testing.T, dir, cn string) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{cn}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	_ = os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// The TLS key pair is re-read when the files change (cert-manager rotates them in place).
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "first.example")
	cfg, err := loadTLS(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	name := func() string {
		c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		return leaf.Subject.CommonName
	}
	if name() != "first.example" {
		t.Fatal("first certificate not served")
	}
	writeCert(t, dir, "second.example")
	later := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(filepath.Join(dir, "tls.crt"), later, later)
	if got := name(); got != "second.example" {
		t.Fatalf("after rotation: %s", got)
	}
	if _, err := loadTLS(filepath.Join(dir, "missing.crt"), filepath.Join(dir, "tls.key")); err == nil {
		t.Fatal("a missing certificate was accepted")
	}
}

// --debug-trace-file is off unless given; given, the gateway's run is traced into it (a Go
// execution trace), ended when the run ends.
func TestDebugTraceFile(t *testing.T) {
	o, err := parse(t, "--backends=127.0.0.1:8001")
	if err != nil || o.debugTraceFile != "" {
		t.Fatalf("default --debug-trace-file %q (%v), want empty: no trace", o.debugTraceFile, err)
	}
	path := filepath.Join(t.TempDir(), "gw.trace")
	if o, err = parse(t, "--backends=127.0.0.1:8001", "--debug-trace-file="+path); err != nil || o.debugTraceFile != path {
		t.Fatalf("--debug-trace-file: %q %v", o.debugTraceFile, err)
	}
	ran := false
	if err := traced(o.debugTraceFile, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("traced: %v, ran %v", err, ran)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(b), "go 1.") || len(b) < 100 {
		t.Fatalf("trace file: %d bytes, %v", len(b), err)
	}
	if err := traced(filepath.Join(path, "under-a-file"), func() error { t.Error("ran without its trace"); return nil }); err == nil {
		t.Error("an unwritable --debug-trace-file: no error")
	}
}
