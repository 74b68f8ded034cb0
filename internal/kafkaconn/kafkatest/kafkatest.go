// Package kafkatest starts franz-go's in-process Kafka cluster (kfake) on TLS for the tests of
// the Kafka clients (internal/kafkaconn and its users): a self-signed certificate for
// 127.0.0.1, the pool that trusts it, and the first byte of every connection the brokers
// accept, read before the TLS listener.
package kafkatest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TLSCluster is a running kfake cluster that serves TLS only.
type TLSCluster struct {
	// Addrs are the brokers' host:port (127.0.0.1).
	Addrs []string
	// Roots trusts the brokers' self-signed certificate.
	Roots *x509.CertPool

	mu    sync.Mutex
	first []byte
}

// StartTLS starts a one-broker kfake cluster serving TLS with opts added (topics, SASL users),
// closed at the end of the test.
func StartTLS(t testing.TB, opts ...kfake.Opt) *TLSCluster {
	t.Helper()
	cert, roots := selfSigned(t)
	tc := &TLSCluster{Roots: roots}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(tc.listen),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tc.Addrs = c.ListenAddrs()
	return tc
}

// FirstBytes returns the first byte of every connection accepted so far, in order: 0x16 opens
// a TLS handshake record, a plaintext Kafka request starts with its length (0x00).
func (c *TLSCluster) FirstBytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.first...)
}

// CheckAllTLS fails the test unless at least one connection was accepted and each opened with
// a TLS handshake record.
func (c *TLSCluster) CheckAllTLS(t testing.TB) {
	t.Helper()
	got := c.FirstBytes()
	if len(got) == 0 {
		t.Fatal("the broker accepted no connection")
	}
	for i, b := range got {
		if b != 0x16 {
			t.Fatalf("connection %d opened with %#x, want a TLS handshake record (0x16); all: % x", i, b, got)
		}
	}
}

func (c *TLSCluster) listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return &peekListener{Listener: ln, c: c}, nil
}

type peekListener struct {
	net.Listener
	c *TLSCluster
}

func (l *peekListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &peekConn{Conn: conn, c: l.c}, nil
}

type peekConn struct {
	net.Conn
	c    *TLSCluster
	once sync.Once
}

func (p *peekConn) Read(b []byte) (int, error) {
	n, err := p.Conn.Read(b)
	if n > 0 {
		p.once.Do(func() {
			p.c.mu.Lock()
			p.c.first = append(p.c.first, b[0])
			p.c.mu.Unlock()
		})
	}
	return n, err
}

// selfSigned returns a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kfake"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// CountingDialer is a stand-in for the egress policy's dialer that counts its connections.
type CountingDialer struct{ n atomic.Int32 }

// Dial connects with a net.Dialer and counts.
func (d *CountingDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// Count is the number of connections Dial opened.
func (d *CountingDialer) Count() int { return int(d.n.Load()) }
