package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// TestRedisClientCarriesConnFlags parses the shared Redis flags: the
// gateway's client (pins, activity, quotas) carries the user, the password
// from its file and the TLS configuration.
func TestRedisClientCarriesConnFlags(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("gw", flag.ContinueOnError)
	o := &options{}
	o.register(fs)
	if err := fs.Parse([]string{"--redis-addr=r:6379", "--redis-username=gateway", "--redis-password-file=" + pw, "--redis-tls", "--redis-server-name=redis.internal"}); err != nil {
		t.Fatal(err)
	}
	c, err := o.redisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ro := c.Options()
	if ro.Username != "gateway" || ro.Password != "s3cret" || ro.TLSConfig == nil || ro.TLSConfig.ServerName != "redis.internal" {
		t.Fatalf("gateway Redis options: user %q, password %q, TLS %+v", ro.Username, ro.Password, ro.TLSConfig)
	}
	if c, err := (&options{}).redisClient(); c != nil || err != nil {
		t.Fatalf("without --redis-addr: %v, %v; want no client", c, err)
	}
}
