package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certSpec describes one certificate signed by the cluster CA.
type certSpec struct {
	name   string // file stem under the PKI directory
	cn     string
	orgs   []string
	server bool
	client bool
	dns    []string
	ips    []net.IP
}

// pki holds the CA used to sign every cluster certificate.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// ensurePKI creates, or loads when present, the CA, every component
// certificate and the service-account key pair under dir. Existing files are
// kept so that a restarted cluster keeps trusting its kubeconfig.
func ensurePKI(dir string, specs []certSpec) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating PKI directory %s: %w", dir, err)
	}
	p := &pki{dir: dir}
	if err := p.ensureCA(); err != nil {
		return nil, err
	}
	for _, s := range specs {
		if fileExists(p.path(s.name+".crt")) && fileExists(p.path(s.name+".key")) {
			continue
		}
		if err := p.issue(s); err != nil {
			return nil, fmt.Errorf("issuing certificate %s: %w", s.name, err)
		}
	}
	if !fileExists(p.path("sa.key")) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, fmt.Errorf("generating service-account key: %w", err)
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("encoding service-account public key: %w", err)
		}
		if err := writePEM(p.path("sa.pub"), "PUBLIC KEY", pub); err != nil {
			return nil, err
		}
		if err := writePEM(p.path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p *pki) ensureCA() error {
	if fileExists(p.path("ca.crt")) && fileExists(p.path("ca.key")) {
		cert, key, err := loadPair(p.path("ca.crt"), p.path("ca.key"))
		if err != nil {
			return fmt.Errorf("loading cluster CA: %w", err)
		}
		p.caCert, p.caKey = cert, key
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "neuronetes-local-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("self-signing CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("parsing CA: %w", err)
	}
	if err := writeKeyPair(p.path("ca"), der, key); err != nil {
		return err
	}
	p.caCert, p.caKey = cert, key
	return nil
}

func (p *pki) issue(s certSpec) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(5, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     s.dns,
		IPAddresses:  s.ips,
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	return writeKeyPair(p.path(s.name), der, key)
}

func writeKeyPair(stem string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding key %s: %w", stem, err)
	}
	if err := writePEM(stem+".key", "EC PRIVATE KEY", kb); err != nil {
		return err
	}
	return writePEM(stem+".crt", "CERTIFICATE", der)
}

func writePEM(path, typ string, b []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return n
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
