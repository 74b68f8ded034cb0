// Package app wires the sidecar together: configuration from flags with
// environment fallbacks, the Redis client, keys, store, vector shard and the
// HTTP, unix-socket and gRPC listeners.
package app

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/internal/redisconn"
	"github.com/neuronetes/neuronetes/sidecar/frame"
)

// Config is the sidecar's configuration. Every field has a flag and an
// environment variable (named in Bind); flags win over the environment.
type Config struct {
	HTTPAddr   string
	UnixSocket string
	GRPCAddr   string

	RedisAddrs         string // comma-separated
	RedisMode          string // standalone, sentinel, cluster
	RedisMaster        string // sentinel master name
	RedisUsername      string
	RedisPasswordFile  string
	RedisDB            int
	RedisTLS           bool
	RedisCAFile        string
	RedisCertFile      string
	RedisKeyFile       string
	RedisServerName    string
	RedisTLSSkipVerify bool
	RedisTimeout       time.Duration

	KeysDir       string
	KeysReload    time.Duration
	Namespace     string
	AgentClass    string
	DefaultTTL    time.Duration
	MaxTTL        time.Duration
	MaxSession    int
	RefreshOnRead bool
	HTTPEngine    string
	Compression   string
	ZstdDict      bool
	// AcceptV1Frames opens format 1 frames of earlier releases, which bind
	// no session version.
	AcceptV1Frames bool

	NearCacheBytes  int
	NearCacheMaxAge time.Duration

	VectorDir          string
	VectorMaxBytes     int64
	VectorNProbe       int
	VectorSaveInterval time.Duration
	EmbeddingBytes     int
	EmbeddingRedis     bool
	EmbeddingTTL       time.Duration
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(env(name, "")); err == nil {
		return n
	}
	return def
}

func envBool(name string, def bool) bool {
	if b, err := strconv.ParseBool(env(name, "")); err == nil {
		return b
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(env(name, "")); err == nil {
		return d
	}
	return def
}

// Bind registers the flags on fs, with defaults from the environment.
func (c *Config) Bind(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "http-addr", env("NEURONETES_HTTP_ADDR", "127.0.0.1:7070"), "HTTP/JSON listen address; loopback unless deliberately exposed ($NEURONETES_HTTP_ADDR)")
	fs.StringVar(&c.UnixSocket, "unix-socket", env("NEURONETES_UNIX_SOCKET", "/var/run/neuronetes/sidecar.sock"), "HTTP/JSON unix socket path, empty to disable ($NEURONETES_UNIX_SOCKET)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", env("NEURONETES_GRPC_ADDR", "127.0.0.1:7071"), "gRPC listen address, empty to disable ($NEURONETES_GRPC_ADDR)")
	fs.StringVar(&c.RedisAddrs, "redis-addr", env("NEURONETES_REDIS_ADDR", "127.0.0.1:6379"), "Redis address(es), comma-separated: the server, the sentinels or cluster seeds ($NEURONETES_REDIS_ADDR)")
	fs.StringVar(&c.RedisMode, "redis-mode", env("NEURONETES_REDIS_MODE", "standalone"), "standalone, sentinel or cluster ($NEURONETES_REDIS_MODE)")
	fs.StringVar(&c.RedisMaster, "redis-master", env("NEURONETES_REDIS_MASTER", ""), "Sentinel master name ($NEURONETES_REDIS_MASTER)")
	fs.StringVar(&c.RedisUsername, "redis-username", env("NEURONETES_REDIS_USERNAME", ""), "Redis ACL user ($NEURONETES_REDIS_USERNAME)")
	fs.StringVar(&c.RedisPasswordFile, "redis-password-file", env("NEURONETES_REDIS_PASSWORD_FILE", ""), "file holding the Redis password; $NEURONETES_REDIS_PASSWORD is used when unset")
	fs.IntVar(&c.RedisDB, "redis-db", envInt("NEURONETES_REDIS_DB", 0), "Redis database (standalone/sentinel) ($NEURONETES_REDIS_DB)")
	fs.BoolVar(&c.RedisTLS, "redis-tls", envBool("NEURONETES_REDIS_TLS", false), "connect to Redis over TLS ($NEURONETES_REDIS_TLS)")
	fs.StringVar(&c.RedisCAFile, "redis-ca-file", env("NEURONETES_REDIS_CA_FILE", ""), "PEM CA bundle for Redis TLS ($NEURONETES_REDIS_CA_FILE)")
	fs.StringVar(&c.RedisCertFile, "redis-cert-file", env("NEURONETES_REDIS_CERT_FILE", ""), "client certificate for Redis mTLS ($NEURONETES_REDIS_CERT_FILE)")
	fs.StringVar(&c.RedisKeyFile, "redis-key-file", env("NEURONETES_REDIS_KEY_FILE", ""), "client key for Redis mTLS ($NEURONETES_REDIS_KEY_FILE)")
	fs.StringVar(&c.RedisServerName, "redis-server-name", env("NEURONETES_REDIS_SERVER_NAME", ""), "TLS server name override ($NEURONETES_REDIS_SERVER_NAME)")
	fs.BoolVar(&c.RedisTLSSkipVerify, "redis-tls-insecure-skip-verify", envBool("NEURONETES_REDIS_TLS_INSECURE_SKIP_VERIFY", false), "do not verify the Redis certificate (testing only)")
	fs.DurationVar(&c.RedisTimeout, "redis-timeout", envDur("NEURONETES_REDIS_TIMEOUT", time.Second), "Redis dial/read/write timeout ($NEURONETES_REDIS_TIMEOUT)")
	fs.StringVar(&c.KeysDir, "keys-dir", env("NEURONETES_KEYS_DIR", "/etc/neuronetes/keys"), "mounted Secret with the tenant's keys ($NEURONETES_KEYS_DIR)")
	fs.DurationVar(&c.KeysReload, "keys-reload", envDur("NEURONETES_KEYS_RELOAD", 30*time.Second), "how often to re-read the keys dir for rotation ($NEURONETES_KEYS_RELOAD)")
	fs.StringVar(&c.Namespace, "namespace", env("NEURONETES_NAMESPACE", ""), "tenant: the pod's namespace, from the downward API ($NEURONETES_NAMESPACE)")
	fs.StringVar(&c.AgentClass, "agent-class", env("NEURONETES_AGENT_CLASS", ""), "agent_class label of the retrieval metrics ($NEURONETES_AGENT_CLASS)")
	fs.DurationVar(&c.DefaultTTL, "default-ttl", envDur("NEURONETES_DEFAULT_TTL", 24*time.Hour), "session TTL when a write names none ($NEURONETES_DEFAULT_TTL)")
	fs.DurationVar(&c.MaxTTL, "max-ttl", envDur("NEURONETES_MAX_TTL", 30*24*time.Hour), "largest per-entry TTL accepted ($NEURONETES_MAX_TTL)")
	fs.IntVar(&c.MaxSession, "max-session-bytes", envInt("NEURONETES_MAX_SESSION_BYTES", 1<<20), "largest session JSON; larger writes get 413 ($NEURONETES_MAX_SESSION_BYTES)")
	fs.BoolVar(&c.RefreshOnRead, "refresh-on-read", envBool("NEURONETES_REFRESH_ON_READ", true), "reset a session's TTL when it is read ($NEURONETES_REFRESH_ON_READ)")
	fs.StringVar(&c.HTTPEngine, "http-engine", env("NEURONETES_HTTP_ENGINE", "fasthttp"), "HTTP server of the API: fasthttp (lower latency) or net (net/http); same API on both ($NEURONETES_HTTP_ENGINE)")
	fs.StringVar(&c.Compression, "compression", env("NEURONETES_COMPRESSION", string(frame.CompressS2)), "codec of new frames: s2 (fastest to seal and open), zstd (frames about 20% smaller, about 2x slower to seal) or none; readers open all ($NEURONETES_COMPRESSION)")
	fs.BoolVar(&c.ZstdDict, "zstd-dict", envBool("NEURONETES_ZSTD_DICT", true), "compress with the built-in JSON dictionary, for s2 and zstd alike (smaller frames for small sessions; readers handle both) ($NEURONETES_ZSTD_DICT)")
	fs.BoolVar(&c.AcceptV1Frames, "accept-v1-frames", envBool("NEURONETES_ACCEPT_V1_FRAMES", true), "open frames of format 1 (earlier releases), which bind no session version, so one written back to Redis opens as current; turn off once every value written before the upgrade expired ($NEURONETES_ACCEPT_V1_FRAMES)")
	fs.IntVar(&c.NearCacheBytes, "near-cache-bytes", envInt("NEURONETES_NEAR_CACHE_BYTES", 64<<20), "near-cache budget, 0 disables ($NEURONETES_NEAR_CACHE_BYTES)")
	fs.DurationVar(&c.NearCacheMaxAge, "near-cache-max-age", envDur("NEURONETES_NEAR_CACHE_MAX_AGE", 5*time.Second), "longest a near-cache entry is served without Redis ($NEURONETES_NEAR_CACHE_MAX_AGE)")
	fs.StringVar(&c.VectorDir, "vector-dir", env("NEURONETES_VECTOR_DIR", ""), "directory persisting the vector shard, empty for memory only ($NEURONETES_VECTOR_DIR)")
	fs.Int64Var(&c.VectorMaxBytes, "vector-max-bytes", int64(envInt("NEURONETES_VECTOR_MAX_BYTES", 256<<20)), "vector shard memory budget (LRU eviction) ($NEURONETES_VECTOR_MAX_BYTES)")
	fs.IntVar(&c.VectorNProbe, "vector-nprobe", envInt("NEURONETES_VECTOR_NPROBE", 16), "IVF lists probed per search ($NEURONETES_VECTOR_NPROBE)")
	fs.DurationVar(&c.VectorSaveInterval, "vector-save-interval", envDur("NEURONETES_VECTOR_SAVE_INTERVAL", 5*time.Minute), "how often a changed shard is saved ($NEURONETES_VECTOR_SAVE_INTERVAL)")
	fs.IntVar(&c.EmbeddingBytes, "embedding-cache-bytes", envInt("NEURONETES_EMBEDDING_CACHE_BYTES", 64<<20), "local embedding-cache budget ($NEURONETES_EMBEDDING_CACHE_BYTES)")
	fs.BoolVar(&c.EmbeddingRedis, "embedding-redis", envBool("NEURONETES_EMBEDDING_REDIS", true), "also keep embeddings in Redis, sealed ($NEURONETES_EMBEDDING_REDIS)")
	fs.DurationVar(&c.EmbeddingTTL, "embedding-ttl", envDur("NEURONETES_EMBEDDING_TTL", 7*24*time.Hour), "TTL of embeddings in Redis ($NEURONETES_EMBEDDING_TTL)")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.Namespace == "" {
		return fmt.Errorf("namespace: required (set NEURONETES_NAMESPACE from the downward API)")
	}
	switch c.RedisMode {
	case "standalone", "cluster":
	case "sentinel":
		if c.RedisMaster == "" {
			return fmt.Errorf("redis-master: required in sentinel mode")
		}
	default:
		return fmt.Errorf("redis-mode %q: want standalone, sentinel or cluster", c.RedisMode)
	}
	if c.addrs() == nil {
		return fmt.Errorf("redis-addr: empty")
	}
	if (c.RedisCertFile == "") != (c.RedisKeyFile == "") {
		return fmt.Errorf("redis-cert-file and redis-key-file: set both or neither")
	}
	if c.HTTPEngine != "fasthttp" && c.HTTPEngine != "net" {
		return fmt.Errorf("http-engine %q: want fasthttp or net", c.HTTPEngine)
	}
	if _, err := frame.ParseCompression(c.Compression); err != nil {
		return err
	}
	if c.MaxSession <= 0 || c.DefaultTTL <= 0 || c.DefaultTTL > c.MaxTTL {
		return fmt.Errorf("max-session-bytes %d / default-ttl %s / max-ttl %s: must be positive, default <= max", c.MaxSession, c.DefaultTTL, c.MaxTTL)
	}
	return nil
}

func (c *Config) addrs() []string {
	var out []string
	for _, a := range strings.Split(c.RedisAddrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// RedisOptions builds the go-redis options for the configured mode.
func (c *Config) RedisOptions() (*redis.UniversalOptions, error) {
	o := &redis.UniversalOptions{
		Addrs:        c.addrs(),
		Username:     c.RedisUsername,
		DB:           c.RedisDB,
		DialTimeout:  c.RedisTimeout,
		ReadTimeout:  c.RedisTimeout,
		WriteTimeout: c.RedisTimeout,
		PoolTimeout:  c.RedisTimeout,
		// No automatic retries: a write whose reply was lost is reported as
		// 503 (unacknowledged) rather than silently re-applied.
		MaxRetries:    -1,
		DialerRetries: 1,
	}
	conn := redisconn.Flags{Username: c.RedisUsername, PasswordFile: c.RedisPasswordFile, TLS: c.RedisTLS,
		CAFile: c.RedisCAFile, CertFile: c.RedisCertFile, KeyFile: c.RedisKeyFile, ServerName: c.RedisServerName}
	var err error
	if o.Password, err = conn.Password(); err != nil {
		return nil, err
	}
	switch c.RedisMode {
	case "standalone":
		o.Addrs = o.Addrs[:1]
	case "sentinel":
		o.MasterName = c.RedisMaster
	case "cluster":
		o.IsClusterMode = true
	}
	if o.TLSConfig, err = conn.TLSConfig(); err != nil {
		return nil, err
	}
	if o.TLSConfig != nil {
		o.TLSConfig.InsecureSkipVerify = c.RedisTLSSkipVerify //nolint:gosec // opt-in testing flag
	}
	return o, nil
}
