package tlsdial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDialTLS handshakes over the given dialer's connection, checks the certificate against
// the host dialed, names the service in a handshake error, and passes plaintext through
// untouched without a configuration.
func TestDialTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	addr := srv.Listener.Addr().String()
	for _, tc := range []struct {
		name    string
		cfg     *tls.Config
		wantTLS bool
		wantErr string
	}{
		{"trusted, server name from the address", &tls.Config{RootCAs: roots}, true, ""},
		{"untrusted", &tls.Config{}, false, "kafka TLS handshake with " + addr},
		{"server name the certificate lacks", &tls.Config{RootCAs: roots, ServerName: "elsewhere.test"}, false, "kafka TLS handshake"},
		{"no configuration: plaintext", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dials := 0
			dial := func(ctx context.Context, network, a string) (net.Conn, error) {
				dials++
				var d net.Dialer
				return d.DialContext(ctx, network, a)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := DialTLS("kafka", dial, tc.cfg)(ctx, "tcp", addr)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("dial: %v, want %q", err, tc.wantErr)
			}
			if dials != 1 {
				t.Fatalf("the given dialer ran %d times, want 1", dials)
			}
			if c != nil {
				defer c.Close()
				if _, isTLS := c.(*tls.Conn); isTLS != tc.wantTLS {
					t.Fatalf("connection %T, want TLS %v", c, tc.wantTLS)
				}
			}
		})
	}
}
