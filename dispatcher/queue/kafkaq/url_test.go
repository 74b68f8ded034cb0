package kafkaq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/internal/credurl"
	"github.com/neuronetes/neuronetes/internal/kafkaconn"
	"github.com/neuronetes/neuronetes/internal/kafkaconn/kafkatest"
)

// TestURLErrors: every client construction parses its URL with internal/kafkaconn; a bad one
// is refused naming queueConfig.url, or --kafka-url for the default, never showing a password.
func TestURLErrors(t *testing.T) {
	for _, tc := range []struct {
		name, url, def, wantErr string
	}{
		{"credentials over plaintext", "kafka://alice:s3cret@k0:9092", "", "queueConfig.url: SASL credentials need kafkas:// (TLS)"},
		{"unknown sasl", "kafkas://alice:s3cret@k0:9093?sasl=gssapi", "", `queueConfig.url "kafkas://alice:xxxxx@k0:9093?sasl=gssapi": unknown sasl`},
		{"bad default", "", "kafka://k0:ninety", `--kafka-url "kafka://k0:ninety": broker "k0:ninety": port "ninety" is not a number`},
		{"neither", "", "", "no default Kafka URL (--kafka-url)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provider{DefaultURL: tc.def}
			defer p.Close()
			ctx := context.Background()
			_, errP := p.Publisher(ctx, tc.url)
			_, errC := p.Consumer(ctx, queue.Options{URL: tc.url, Queue: "in", Group: "g"})
			_, errL := p.Lag(ctx, queue.Options{URL: tc.url, Queue: "in", Group: "g"})
			for what, err := range map[string]error{"Publisher": errP, "Consumer": errC, "Lag": errL} {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "s3cret") {
					t.Errorf("%s: %v, want %q without the password", what, err, tc.wantErr)
				}
			}
		})
	}
}

// TestSharedClientPerURL: two URLs of the same seeds differing in scheme or credentials get
// their own client; the same URL shares one.
func TestSharedClientPerURL(t *testing.T) {
	p := &Provider{}
	defer p.Close()
	urls := []string{"kafka://127.0.0.1:1", "kafkas://127.0.0.1:1", "kafkas://a:b@127.0.0.1:1", "kafkas://a:c@127.0.0.1:1", "kafkas://a:b@127.0.0.1:1?sasl=scram-sha-512"}
	seen := map[*sharedClient]string{}
	for _, u := range urls {
		c, err := p.client(u)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := seen[c]; ok {
			t.Fatalf("%s shares the client of %s", credurl.Redact(u), credurl.Redact(other))
		}
		seen[c] = u
		if again, _ := p.client(u); again != c {
			t.Fatalf("%s: a second client", credurl.Redact(u))
		}
	}
}

// TestTLSThroughTheDialer: the consumer-group client and the shared client of a kafkas:// URL
// connect through Provider.Dial and open every connection with a TLS handshake record (the
// brokers' certificate is not trusted here: only the first bytes are checked).
func TestTLSThroughTheDialer(t *testing.T) {
	c := kafkatest.StartTLS(t, kfake.SeedTopics(1, "in"))
	var d kafkatest.CountingDialer
	p := &Provider{Dial: d.Dial}
	defer p.Close()
	url := "kafkas://" + strings.Join(c.Addrs, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cons, err := p.Consumer(ctx, queue.Options{URL: url, Queue: "in", Group: "g", AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = cons.Fetch(ctx, 1, time.Second)
	_ = cons.Close()
	afterConsumer := d.Count()
	if _, err := p.Lag(ctx, queue.Options{URL: url, Queue: "in", Group: "g"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Lag against an untrusted certificate: %v, want a certificate error", err)
	}
	if afterConsumer == 0 || d.Count() == afterConsumer {
		t.Fatalf("dials: %d by the consumer, %d by the shared client; want both through Provider.Dial", afterConsumer, d.Count()-afterConsumer)
	}
	c.CheckAllTLS(t)
}

// TestPublishedSearchKeepsTLSAndSASL: the search for an earlier publish builds its own client
// from the shared client's connection options, so it reaches a TLS and SCRAM-only broker.
func TestPublishedSearchKeepsTLSAndSASL(t *testing.T) {
	c := kafkatest.StartTLS(t, kfake.SeedTopics(1, "out"), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "admin", "s3cret"))
	o, err := kafkaconn.ParseURL("queueConfig.url", "kafkas://admin:s3cret@"+strings.Join(c.Addrs, ",")+"?sasl=scram-sha-256")
	if err != nil {
		t.Fatal(err)
	}
	o.TLS.RootCAs = c.Roots
	var d kafkatest.CountingDialer
	opts := o.Opts(d.Dial)
	cl, err := kgo.NewClient(append(opts, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pub := &publisher{cl: cl, adm: kadm.NewClient(cl), opts: opts}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	since := time.Now().Add(-time.Minute)
	if err := pub.Publish(ctx, queue.Outgoing{Dest: "out", ID: "m1", Body: []byte("x")}, false, since); err != nil {
		t.Fatal(err)
	}
	before := d.Count()
	found, err := pub.published(ctx, "out", "m1", since)
	if err != nil || !found {
		t.Fatalf("published = %v, %v; want found", found, err)
	}
	if d.Count() == before {
		t.Fatal("the search client did not dial through the injected dialer")
	}
	c.CheckAllTLS(t)
}
