package redisconn

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// firstByte listens on loopback and reports the first byte of the first
// connection: 0x16 opens a TLS handshake, '*' a plaintext RESP command.
func firstByte(t *testing.T) (string, <-chan byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(b); err == nil {
			ch <- b[0]
		}
	}()
	return ln.Addr().String(), ch
}

// TestSetDialerKeepsTLS checks that a custom dialer (the egress policy's)
// keeps a rediss:// URL on TLS: go-redis alone would send the handshake,
// and the password, in plaintext once its dialer is replaced.
func TestSetDialerKeepsTLS(t *testing.T) {
	var d net.Dialer
	for _, tc := range []struct {
		name   string
		scheme string
		dial   Dialer
		want   byte
	}{
		{"rediss through a custom dialer", "rediss://", d.DialContext, 0x16},
		{"rediss through go-redis' dialer", "rediss://", nil, 0x16},
		{"redis through a custom dialer", "redis://", d.DialContext, '*'},
		{"bare host:port is plaintext", "", d.DialContext, '*'},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, got := firstByte(t)
			o, err := ParseURL("queueConfig.url", tc.scheme+"user:secret@"+addr)
			if tc.scheme == "" {
				o, err = ParseURL("queueConfig.url", addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			o.MaxRetries, o.DialTimeout = -1, 2*time.Second
			SetDialer(o, tc.dial)
			c := redis.NewClient(o)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			go func() { _ = c.Ping(ctx).Err() }()
			select {
			case b := <-got:
				if b != tc.want {
					t.Fatalf("first byte %#x, want %#x", b, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no connection reached the server")
			}
		})
	}
}

// TestParseURLNamesTheField refuses a malformed URL naming the setting, never its password.
func TestParseURLNamesTheField(t *testing.T) {
	if _, err := ParseURL("queueConfig.url", "redis://host:6379/notadb"); err == nil || !strings.Contains(err.Error(), "queueConfig.url") {
		t.Fatalf("err = %v, want one naming queueConfig.url", err)
	}
	for _, bad := range []string{"rediss://u:s3cret@host:6379/notadb", "redis://u:s3cret@host:port/0"} {
		if _, err := ParseURL("queueConfig.url", bad); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("ParseURL(%s) err = %v, want one that hides the password", bad, err)
		}
	}
	o, err := ParseURL("queueConfig.url", "r.example:6380/2")
	if err != nil || o.Addr != "r.example:6380" || o.DB != 2 || o.TLSConfig != nil {
		t.Fatalf("ParseURL(host:port/db) = %+v, %v", o, err)
	}
}
