package kafkaconn

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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// selfSigned returns a server certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
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

// firstBytes records the first byte every accepted connection sends, before kfake's TLS
// listener (if any) reads it: 0x16 opens a TLS handshake record, a plaintext Kafka request
// starts with its length (0x00).
type firstBytes struct {
	mu    sync.Mutex
	bytes []byte
}

func (f *firstBytes) listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return &peekListener{Listener: ln, f: f}, nil
}

func (f *firstBytes) got() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.bytes...)
}

type peekListener struct {
	net.Listener
	f *firstBytes
}

func (l *peekListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &peekConn{Conn: c, f: l.f}, nil
}

type peekConn struct {
	net.Conn
	f    *firstBytes
	once sync.Once
}

func (c *peekConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.once.Do(func() {
			c.f.mu.Lock()
			c.f.bytes = append(c.f.bytes, b[0])
			c.f.mu.Unlock()
		})
	}
	return n, err
}

// countingDialer is a stand-in for the egress policy's dialer that counts its connections.
type countingDialer struct{ n atomic.Int32 }

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// roundTrip pings the broker, produces one record to topic "t" and consumes it back with the client options of u
// (RootCAs set to roots), connecting through dial.
func roundTrip(t *testing.T, u string, roots *x509.CertPool, dial Dialer) error {
	t.Helper()
	o, err := ParseURL("queueConfig.url", u)
	if err != nil {
		t.Fatal(err)
	}
	if o.TLS != nil {
		o.TLS.RootCAs = roots
	}
	cl, err := kgo.NewClient(append(o.Opts(dial), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequestRetries(1), kgo.RetryTimeout(3*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Ping returns the connection's error (handshake, authentication); a produce would retry
	// until the deadline.
	if err := cl.Ping(ctx); err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("hello")}).FirstErr(); err != nil {
		return err
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if recs := fs.Records(); len(recs) > 0 {
			if string(recs[0].Value) != "hello" {
				t.Fatalf("consumed %q, want hello", recs[0].Value)
			}
			return nil
		}
	}
}

func startCluster(t *testing.T, opts ...kfake.Opt) (string, *firstBytes, *x509.CertPool) {
	t.Helper()
	cert, roots := selfSigned(t)
	fb := &firstBytes{}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.ListenFn(fb.listen),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ","), fb, roots
}

// TestTLSThroughTheDialer: a kafkas:// URL produces and consumes through the injected dialer,
// and every connection the broker accepts opens with a TLS handshake record (0x16), so the
// egress policy's dialer never turns a TLS URL into plaintext. The broker's certificate
// verifies only against the pool it is signed into (not the system roots), for 127.0.0.1.
func TestTLSThroughTheDialer(t *testing.T) {
	addrs, fb, roots := startCluster(t)
	for _, tc := range []struct {
		name     string
		roots    *x509.CertPool
		injected bool // through a counting dialer; false: nil (a net.Dialer)
		wantErr  string
	}{
		{"trusted root, injected dialer", roots, true, ""},
		{"trusted root, no dialer", roots, false, ""},
		{"system roots", nil, true, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d countingDialer
			dial := d.dial
			if !tc.injected {
				dial = nil
			}
			err := roundTrip(t, "kafkas://"+addrs, tc.roots, dial)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("round trip: %v, want %q", err, tc.wantErr)
			}
			if tc.injected && d.n.Load() == 0 {
				t.Fatal("the injected dialer was not used")
			}
		})
	}
	got := fb.got()
	if len(got) == 0 {
		t.Fatal("the broker saw no connection")
	}
	for i, b := range got {
		if b != 0x16 {
			t.Fatalf("connection %d opened with %#x, want a TLS handshake record (0x16); all: % x", i, b, got)
		}
	}
}

// TestSASLOverTLS authenticates a SCRAM-SHA-256 superuser over TLS through the injected dialer;
// wrong credentials, or the right ones with another mechanism, fail.
func TestSASLOverTLS(t *testing.T) {
	addrs, fb, roots := startCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "admin", "s3cr%t"))
	for _, tc := range []struct {
		name, userinfo, query string
		ok                    bool
	}{
		{"scram-sha-256, percent-encoded password", "admin:s3cr%25t@", "?sasl=scram-sha-256", true},
		{"wrong password", "admin:nope@", "?sasl=scram-sha-256", false},
		{"wrong user", "root:s3cr%25t@", "?sasl=scram-sha-256", false},
		{"other mechanism", "admin:s3cr%25t@", "?sasl=plain", false},
		{"no credentials", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d countingDialer
			// kfake closes the connection of a failed authentication: the error is an EOF.
			if err := roundTrip(t, "kafkas://"+tc.userinfo+addrs+tc.query, roots, d.dial); (err == nil) != tc.ok {
				t.Fatalf("round trip: %v, want success %v", err, tc.ok)
			}
			if d.n.Load() == 0 {
				t.Fatal("the injected dialer was not used")
			}
		})
	}
	for i, b := range fb.got() {
		if b != 0x16 {
			t.Fatalf("connection %d opened with %#x, want 0x16", i, b)
		}
	}
}
