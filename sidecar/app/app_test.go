package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func TestConfigEnvAndValidate(t *testing.T) {
	t.Setenv("NEURONETES_REDIS_ADDR", "10.0.0.1:6380,10.0.0.2:6380")
	t.Setenv("NEURONETES_NAMESPACE", "team-a")
	t.Setenv("NEURONETES_REDIS_MODE", "cluster")
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Bind(fs)
	if err := fs.Parse([]string{"--max-session-bytes=2048"}); err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "team-a" || c.MaxSession != 2048 || c.Compression != "s2" || c.HTTPEngine != "fasthttp" || c.HTTPAddr != "127.0.0.1:7070" || c.GRPCAddr != "127.0.0.1:7071" {
		t.Fatalf("config = %+v", c)
	}
	o, err := c.RedisOptions()
	if err != nil || !o.IsClusterMode || len(o.Addrs) != 2 {
		t.Fatalf("cluster options = %+v, %v", o, err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"valid", func(*Config) {}, true},
		{"no namespace", func(c *Config) { c.Namespace = "" }, false},
		{"sentinel without master", func(c *Config) { c.RedisMode = "sentinel" }, false},
		{"sentinel", func(c *Config) { c.RedisMode, c.RedisMaster = "sentinel", "mymaster" }, true},
		{"bad mode", func(c *Config) { c.RedisMode = "ring" }, false},
		{"cert without key", func(c *Config) { c.RedisCertFile = "x" }, false},
		{"ttl order", func(c *Config) { c.DefaultTTL = 2 * c.MaxTTL }, false},
		{"s2", func(c *Config) { c.Compression = "s2" }, true},
		{"unknown compression", func(c *Config) { c.Compression = "gzip" }, false},
		{"net/http engine", func(c *Config) { c.HTTPEngine = "net" }, true},
		{"unknown engine", func(c *Config) { c.HTTPEngine = "h2" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := c
			tc.mutate(&cc)
			if err := cc.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	c.RedisTLS, c.RedisCAFile = true, filepath.Join(t.TempDir(), "missing.pem")
	if _, err := c.RedisOptions(); err == nil {
		t.Fatal("missing CA file accepted")
	}
}

func writeKeys(t *testing.T, dir, active string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		k := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(id[:1]), 32))
		if err := os.WriteFile(filepath.Join(dir, id), []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "active"), []byte(active+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func startApp(t *testing.T, c Config) (*http.Client, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c) }()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", c.UnixSocket)
	}}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://sidecar/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar not up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return client, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func call(t *testing.T, c *http.Client, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://sidecar"+path, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunRotationPersistenceMetrics runs the whole sidecar on a unix socket.
func TestRunRotationPersistenceMetrics(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	tmp := t.TempDir()
	keysDir := filepath.Join(tmp, "keys")
	_ = os.Mkdir(keysDir, 0o700)
	writeKeys(t, keysDir, "k1", "k1")
	var c Config
	c.Bind(flag.NewFlagSet("t", flag.ContinueOnError))
	c.HTTPAddr, c.GRPCAddr, c.UnixSocket = "", "", filepath.Join(tmp, "run", "sidecar.sock")
	c.RedisAddrs, c.KeysDir, c.KeysReload, c.Namespace = rs.Addr, keysDir, 50*time.Millisecond, "team-a"
	c.VectorDir = filepath.Join(tmp, "vectors")

	client, stop := startApp(t, c)
	if code, body := call(t, client, "PUT", "/v1/sessions/s1", `{"a":1}`); code != 200 {
		t.Fatalf("PUT = %d %s", code, body)
	}
	if code, _ := call(t, client, "POST", "/v1/vectors", `{"id":"doc1","vector":[1,2,3],"metadata":{"t":"x"}}`); code != 200 {
		t.Fatalf("vector insert = %d", code)
	}
	// Rotate: k2 becomes active; s1 (sealed with k1) stays readable.
	writeKeys(t, keysDir, "k2", "k1", "k2")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		call(t, client, "PUT", "/v1/sessions/s2", `{"b":2}`)
		f, _ := rdb.HGet(context.Background(), "nn:{team-a}:sess:s2", "d").Bytes()
		if id, _ := frame.KeyID(f); id == "k2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new writes never used the rotated key")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := call(t, client, "GET", "/v1/sessions/s1", ""); code != 200 || body != `{"a":1}` {
		t.Fatalf("old session after rotation = %d %s", code, body)
	}
	if code, body := call(t, client, "GET", "/metrics", ""); code != 200 || !strings.Contains(body, "neuronetes_sidecar_redis_duration_seconds") ||
		!strings.Contains(body, `neuronetes_sidecar_requests_total{api="http",code="200",op="session_put"}`) {
		t.Fatalf("metrics = %d, missing series", code)
	}
	stop()
	// The vector shard was persisted on shutdown, sealed: no id or metadata in clear.
	if b, err := os.ReadFile(filepath.Join(c.VectorDir, vectorFile)); err != nil || bytes.Contains(b, []byte("doc1")) || bytes.Contains(b, []byte(`"t":"x"`)) {
		t.Fatalf("vector shard (%d bytes, %v) holds plaintext", len(b), err)
	}
	// Restart: the shard opens with the tenant's keys.
	client, stop = startApp(t, c)
	defer stop()
	if code, body := call(t, client, "POST", "/v1/vectors/search", `{"vector":[1,2,3],"k":1}`); code != 200 || !strings.Contains(body, `"id":"doc1"`) {
		t.Fatalf("search after restart = %d %s", code, body)
	}
}

// TestRunWithoutKeysDegrades: with no keys mounted the sidecar still starts,
// answers session calls with 503 (never storing plaintext), and recovers
// when the Secret's files appear.
func TestRunWithoutKeysDegrades(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	tmp := t.TempDir()
	keysDir := filepath.Join(tmp, "keys")
	_ = os.Mkdir(keysDir, 0o700)
	var c Config
	c.Bind(flag.NewFlagSet("t", flag.ContinueOnError))
	c.HTTPAddr, c.GRPCAddr, c.UnixSocket = "", "", filepath.Join(tmp, "sidecar.sock")
	c.RedisAddrs, c.KeysDir, c.KeysReload, c.Namespace = rs.Addr, keysDir, 50*time.Millisecond, "team-a"
	client, stop := startApp(t, c)
	defer stop()
	if code, body := call(t, client, "PUT", "/v1/sessions/s1", `{"a":1}`); code != 503 || !strings.Contains(body, "no encryption keys") {
		t.Fatalf("PUT without keys = %d %s", code, body)
	}
	if _, body := call(t, client, "GET", "/metrics", ""); !strings.Contains(body, "neuronetes_sidecar_keys_loaded 0") {
		t.Fatal("keys_loaded gauge not 0")
	}
	writeKeys(t, keysDir, "k1", "k1")
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := call(t, client, "PUT", "/v1/sessions/s1", `{"a":1}`)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUT after keys appeared = %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, body := call(t, client, "GET", "/metrics", ""); !strings.Contains(body, "neuronetes_sidecar_keys_loaded 1") {
		t.Fatal("keys_loaded gauge not 1")
	}
}

// TestRedisOptionsCarryAuthAndTLS checks that the Redis user, the password
// file and the TLS settings (internal/redisconn) reach the go-redis options.
func TestRedisOptionsCarryAuthAndTLS(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{RedisAddrs: "r:6379", RedisMode: "standalone", RedisUsername: "sidecar-team-a", RedisPasswordFile: pw,
		RedisTLS: true, RedisServerName: "redis.internal", RedisTLSSkipVerify: true}
	o, err := c.RedisOptions()
	if err != nil {
		t.Fatal(err)
	}
	if o.Username != "sidecar-team-a" || o.Password != "s3cret" || o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.internal" || !o.TLSConfig.InsecureSkipVerify {
		t.Fatalf("options: user %q, password %q, TLS %+v", o.Username, o.Password, o.TLSConfig)
	}
}
