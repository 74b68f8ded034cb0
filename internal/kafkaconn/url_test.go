package kafkaconn

import (
	"slices"
	"strings"
	"testing"
)

// TestParseURL parses every URL form, and refuses each bad input with an error that names the
// field and never shows the password.
func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		seeds     []string
		tls       bool
		mech      string // SASL mechanism; "" none
		user      string
		pass      string
		wantErr   string
	}{
		{name: "bare host:port list", url: "k0:9092,k1:9093", seeds: []string{"k0:9092", "k1:9093"}},
		{name: "kafka scheme", url: "kafka://k0.kafka.svc:9092", seeds: []string{"k0.kafka.svc:9092"}},
		{name: "port left out is 9092", url: "kafka://k0,[::1]", seeds: []string{"k0:9092", "[::1]:9092"}},
		{name: "trailing slash", url: "kafka://k0:9092/", seeds: []string{"k0:9092"}},
		{name: "kafkas without credentials", url: "kafkas://k0:9093,k1:9093", seeds: []string{"k0:9093", "k1:9093"}, tls: true},
		{name: "kafkas, upper-case scheme", url: "KAFKAS://k0:9093", seeds: []string{"k0:9093"}, tls: true},
		{name: "credentials default to plain", url: "kafkas://alice:s3cret@k0:9093", seeds: []string{"k0:9093"}, tls: true, mech: SASLPlain, user: "alice", pass: "s3cret"},
		{name: "scram-sha-256", url: "kafkas://alice:s3cret@k0:9093,k1:9093?sasl=scram-sha-256", seeds: []string{"k0:9093", "k1:9093"}, tls: true, mech: SASLScramSHA256, user: "alice", pass: "s3cret"},
		{name: "scram-sha-512 after a slash", url: "kafkas://alice:s3cret@k0:9093/?sasl=SCRAM-SHA-512", seeds: []string{"k0:9093"}, tls: true, mech: SASLScramSHA512, user: "alice", pass: "s3cret"},
		{name: "percent-encoded userinfo", url: "kafkas://us%40er:p%3Ass%2Fw%3F%40x+y@k0:9093", seeds: []string{"k0:9093"}, tls: true, mech: SASLPlain, user: "us@er", pass: "p:ss/w?@x+y"},

		{name: "credentials over plaintext", url: "kafka://alice:s3cret@k0:9092", wantErr: "queueConfig.url: SASL credentials need kafkas:// (TLS)"},
		{name: "credentials over a bare list", url: "alice:s3cret@k0:9092", wantErr: "queueConfig.url: SASL credentials need kafkas:// (TLS)"},
		{name: "empty", url: "", wantErr: "no broker"},
		{name: "empty host list", url: "kafkas://alice:s3cret@", wantErr: "no broker"},
		{name: "empty seed", url: "kafka://k0:9092,,k1:9092", wantErr: "empty broker"},
		{name: "trailing comma", url: "k0:9092,", wantErr: "empty broker"},
		{name: "unknown scheme", url: "nats://k0:4222", wantErr: `unknown scheme "nats"`},
		{name: "unknown sasl", url: "kafkas://alice:s3cret@k0:9093?sasl=gssapi", wantErr: `unknown sasl "gssapi"`},
		{name: "empty sasl", url: "kafkas://alice:s3cret@k0:9093?sasl=", wantErr: `unknown sasl ""`},
		{name: "sasl twice", url: "kafkas://alice:s3cret@k0:9093?sasl=plain&sasl=plain", wantErr: "more than once"},
		{name: "sasl without credentials", url: "kafkas://k0:9093?sasl=plain", wantErr: "sasl needs credentials"},
		{name: "unknown parameter", url: "kafkas://k0:9093?tls=false", wantErr: `unknown parameter "tls"`},
		{name: "port not a number", url: "kafka://k0:ninety", wantErr: `port "ninety" is not a number`},
		{name: "port out of range", url: "kafka://k0:70000", wantErr: `port "70000" is not a number`},
		{name: "empty port", url: "kafka://k0:", wantErr: `port "" is not a number`},
		{name: "empty host", url: "kafka://:9092", wantErr: "bad host"},
		{name: "unbracketed IPv6", url: "kafka://fe80::1:9092", wantErr: "too many colons"},
		{name: "path", url: "kafka://k0:9092/topic", wantErr: "no path"},
		{name: "fragment", url: "kafka://k0:9092#x", wantErr: "no fragment"},
		{name: "user without password", url: "kafkas://s3cret@k0:9093", wantErr: "user:password@"},
		{name: "empty password", url: "kafkas://alice:@k0:9093", wantErr: "non-empty user and password"},
		{name: "bad percent-encoding", url: "kafkas://alice:s3cret%zz@k0:9093", wantErr: "password: invalid percent-encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseURL("queueConfig.url", tc.url)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %+v, want an error %q", tc.url, o, tc.wantErr)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.wantErr) || !strings.HasPrefix(msg, "queueConfig.url") || strings.Contains(msg, "s3cret") {
					t.Fatalf("ParseURL(%q) = %q, want one naming queueConfig.url, containing %q and no password", tc.url, msg, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tc.url, err)
			}
			if !slices.Equal(o.Seeds, tc.seeds) || (o.TLS != nil) != tc.tls || o.mechanism != tc.mech || o.user != tc.user || o.pass != tc.pass || (o.SASL != nil) != (tc.mech != "") {
				t.Fatalf("ParseURL(%q) = seeds %v tls %v sasl %q user %q pass %q; want %v %v %q %q %q",
					tc.url, o.Seeds, o.TLS != nil, o.mechanism, o.user, o.pass, tc.seeds, tc.tls, tc.mech, tc.user, tc.pass)
			}
			if o.TLS != nil && (o.TLS.InsecureSkipVerify || o.TLS.ServerName != "" || o.TLS.RootCAs != nil) {
				t.Fatalf("TLS config %+v: want verification against the system roots and the host dialed", o.TLS)
			}
			if strings.Contains(o.String(), "s3cret") {
				t.Fatalf("String() = %q shows the password", o.String())
			}
		})
	}
}
