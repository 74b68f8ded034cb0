package scaleloop

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/internal/kafkaconn/kafkatest"
)

// TestLagSourcesDialThroughEgress: a ToolBinding's queueConfig.url on a denied address is refused
// by every lag source's dialer (the controller connects to it only to read lag).
func TestLagSourcesDialThroughEgress(t *testing.T) {
	dial := (&egress.Policy{}).Dialer(time.Second)
	l := &LagSource{Dial: dial}
	defer l.Close()
	if _, err := l.conn("nats://169.254.169.254:4222", time.Second); err == nil || !strings.Contains(err.Error(), "egress denied") {
		t.Errorf("nats: %v, want an egress denial", err)
	}
	q := &QueueLag{Dial: dial}
	defer q.Close()
	c, err := q.redisClient("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "egress denied") {
		t.Errorf("redis: %v, want an egress denial", err)
	}
}

// TestRedisLagKeepsTLSThroughEgress: a rediss:// queueConfig.url read through the egress dialer
// still opens with a TLS handshake, so the URL's password never crosses the network in plaintext.
func TestRedisLagKeepsTLSThroughEgress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	first := make(chan byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err == nil {
			first <- b[0]
		}
	}()
	var d net.Dialer
	q := &QueueLag{Dial: d.DialContext}
	defer q.Close()
	c, err := q.redisClient("rediss://tenant:secret@" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() { _ = c.Ping(ctx).Err() }()
	select {
	case b := <-first:
		if b != 0x16 {
			t.Fatalf("first byte %#x, want a TLS handshake record (0x16)", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection reached the server")
	}
}

// TestKafkaLagKeepsTLSThroughEgress: a kafkas:// queueConfig.url read through the egress dialer
// opens every connection with a TLS handshake (the broker's certificate is not trusted here, so
// the lookup fails on the certificate), and a denied address is refused by the dialer.
func TestKafkaLagKeepsTLSThroughEgress(t *testing.T) {
	c := kafkatest.StartTLS(t, kfake.SeedTopics(1, "tasks"))
	var d kafkatest.CountingDialer
	q := &QueueLag{Dial: d.Dial, Timeout: 2 * time.Second}
	defer q.Close()
	b := queueBinding("kafka", "tasks", "kafkas://"+strings.Join(c.Addrs, ","), "g", true)
	if _, err := q.Lag(context.Background(), b); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("lag against an untrusted certificate: %v, want a certificate error", err)
	}
	if d.Count() == 0 {
		t.Fatal("the lookup did not dial through QueueLag.Dial")
	}
	c.CheckAllTLS(t)

	denied := &QueueLag{Dial: (&egress.Policy{}).Dialer(time.Second), Timeout: 2 * time.Second}
	defer denied.Close()
	b = queueBinding("kafka", "tasks", "kafkas://169.254.169.254:9093", "g", true)
	if _, err := denied.Lag(context.Background(), b); err == nil || !strings.Contains(err.Error(), "egress denied") {
		t.Fatalf("denied address: %v, want an egress denial", err)
	}
}

// TestKafkaLagURLErrors: a bad Kafka URL is refused naming queueConfig.url, or --kafka-url for
// the default, without its password; the cache tells URLs of the same brokers apart.
func TestKafkaLagURLErrors(t *testing.T) {
	for _, tc := range []struct {
		name, url, def, wantErr string
	}{
		{"credentials over plaintext", "kafka://alice:s3cret@k0:9092", "", "queueConfig.url: SASL credentials need kafkas:// (TLS)"},
		{"unknown scheme", "nats://alice:s3cret@k0:9092", "", `queueConfig.url "nats://alice:xxxxx@k0:9092": unknown scheme`},
		{"empty seed in the default", "", "k0:9092,", `--kafka-url "k0:9092,": empty broker`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &QueueLag{DefaultKafkaURL: tc.def}
			defer q.Close()
			_, err := q.Lag(context.Background(), queueBinding("kafka", "tasks", tc.url, "g", true))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("Lag: %v, want %q without the password", err, tc.wantErr)
			}
		})
	}
	q := &QueueLag{}
	defer q.Close()
	plain, _ := q.kafkaClient("queueConfig.url", "kafka://127.0.0.1:1")
	tlsc, _ := q.kafkaClient("queueConfig.url", "kafkas://127.0.0.1:1")
	again, _ := q.kafkaClient("queueConfig.url", "kafka://127.0.0.1:1")
	if plain == nil || plain == tlsc || plain != again {
		t.Fatalf("clients: plain %p, TLS %p, plain again %p; want two, the plain one shared", plain, tlsc, again)
	}
}
