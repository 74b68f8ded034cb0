package kafkaconn

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/neuronetes/neuronetes/internal/kafkaconn/kafkatest"
)

// roundTrip pings the broker, produces one record to topic "t" and consumes it back with the
// client options of u (RootCAs set to roots), connecting through dial.
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

// TestTLSThroughTheDialer: a kafkas:// URL produces and consumes through the injected dialer,
// and every connection the broker accepts opens with a TLS handshake record (0x16), so the
// egress policy's dialer never turns a TLS URL into plaintext. The broker's certificate
// verifies only against the pool it is signed into (not the system roots), for 127.0.0.1.
func TestTLSThroughTheDialer(t *testing.T) {
	c := kafkatest.StartTLS(t, kfake.SeedTopics(1, "t"))
	addrs := strings.Join(c.Addrs, ",")
	for _, tc := range []struct {
		name     string
		roots    *x509.CertPool
		injected bool // through a counting dialer; false: nil (a net.Dialer)
		wantErr  string
	}{
		{"trusted root, injected dialer", c.Roots, true, ""},
		{"trusted root, no dialer", c.Roots, false, ""},
		{"system roots", nil, true, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d kafkatest.CountingDialer
			dial := d.Dial
			if !tc.injected {
				dial = nil
			}
			err := roundTrip(t, "kafkas://"+addrs, tc.roots, dial)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("round trip: %v, want %q", err, tc.wantErr)
			}
			if tc.injected && d.Count() == 0 {
				t.Fatal("the injected dialer was not used")
			}
		})
	}
	c.CheckAllTLS(t)
}

// TestSASLOverTLS authenticates a SCRAM-SHA-256 superuser over TLS through the injected dialer;
// wrong credentials, or the right ones with another mechanism, fail.
func TestSASLOverTLS(t *testing.T) {
	c := kafkatest.StartTLS(t, kfake.SeedTopics(1, "t"), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "admin", "s3cr%t"))
	addrs := strings.Join(c.Addrs, ",")
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
			var d kafkatest.CountingDialer
			// kfake closes the connection of a failed authentication: the error is an EOF.
			if err := roundTrip(t, "kafkas://"+tc.userinfo+addrs+tc.query, c.Roots, d.Dial); (err == nil) != tc.ok {
				t.Fatalf("round trip: %v, want success %v", err, tc.ok)
			}
			if d.Count() == 0 {
				t.Fatal("the injected dialer was not used")
			}
		})
	}
	c.CheckAllTLS(t)
}
