package main

import (
	"encoding/base64"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestIdemSealerSources reads the idempotency key from --idempotency-key-file,
// else $NEURONETES_IDEMPOTENCY_KEY; a bad key names its source.
func TestIdemSealerSources(t *testing.T) {
	good := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	dir := t.TempDir()
	n := 0
	file := func(content string) string {
		n++
		p := filepath.Join(dir, "key"+strconv.Itoa(n))
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, file, env, wantErr string
	}{
		{"file", file(good), "", ""},
		{"file wins over env", file(good), "bad", ""},
		{"bad file", file("short"), "", "--idempotency-key-file"},
		{"missing file", filepath.Join(dir, "none"), "", "--idempotency-key-file"},
		{"env", "", good, ""},
		{"bad env", "", "c2hvcnQ=", "$NEURONETES_IDEMPOTENCY_KEY"},
		{"neither: a key of this process", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NEURONETES_IDEMPOTENCY_KEY", tc.env)
			s, err := (&options{idemKeyFile: tc.file}).idemSealer()
			if tc.wantErr == "" && (err != nil || s == nil) {
				t.Fatalf("idemSealer = %v, %v", s, err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("idemSealer error %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
}

// TestRedisConnFlagsReachEveryClient assembles the dispatcher with a Redis
// user, password file and TLS: the dedupe/status/idempotency client and the
// default Redis Streams client carry them; a queue URL of another Redis does not.
func TestRedisConnFlagsReachEveryClient(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		queueURL string
		wantConn bool
	}{
		{"queue URL from --redis-addr", "", true},
		{"queue URL of its own", "redis://other:6379", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("d", flag.ContinueOnError)
			o := options{}
			o.register(fs)
			args := []string{"--gateway-url=http://g", "--redis-addr=r:6379", "--redis-username=dispatcher", "--redis-password-file=" + pw, "--redis-tls", "--redis-server-name=redis.internal"}
			if tc.queueURL != "" {
				args = append(args, "--redis-queue-url="+tc.queueURL)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := o.validate(); err != nil {
				t.Fatal(err)
			}
			a, err := assemble(&o)
			if err != nil {
				t.Fatal(err)
			}
			defer a.redis.Close()
			ro := a.redis.Options()
			if ro.Username != "dispatcher" || ro.Password != "s3cret" || ro.TLSConfig == nil || ro.TLSConfig.ServerName != "redis.internal" {
				t.Fatalf("dispatcher Redis options: user %q, password %q, TLS %+v", ro.Username, ro.Password, ro.TLSConfig)
			}
			if got := a.redisQueue().DefaultConn != nil; got != tc.wantConn {
				t.Fatalf("Redis Streams default client gets the credentials: %v, want %v", got, tc.wantConn)
			}
		})
	}
}
