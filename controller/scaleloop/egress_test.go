package scaleloop

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/internal/egress"
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
