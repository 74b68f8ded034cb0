package main

import (
	"errors"
	"flag"
	"fmt"
	"k8s.io/apimachinery/pkg/util/validation"
	"os"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/redisconn"
)

// options are the command's flags.
type options struct {
	listen, adminListen string
	tlsCert, tlsKey     string

	// Static-backends mode.
	backends, staticModel, staticPool string

	// Kubernetes mode.
	namespaces string
	auth       string
	anonNS     string
	hashNS     string

	sessionKeyFile string
	dispatchToken  string

	redisAddr, redisPrefix string
	redisTimeout           time.Duration
	quotaFailure           string
	blockedAnswer          string
	// redisConn: --redis-username, --redis-password-file, --redis-tls, ...
	redisConn redisconn.Flags

	connectTimeout, firstTokenTimeout, idleTimeout, responseTimeout time.Duration
	maxBodyBytes, maxResponseBytes                                  int64
	writeTimeout                                                    time.Duration
	wsOrigins                                                       string

	scrapeInterval                  time.Duration
	prefixBlockBytes, prefixEntries int
	maxPins                         int
	shadowParallel                  int
	pickStrategy, kvEventsHash      string

	// Defaults of pools without a RoutingPolicy.
	sessionKeys, weights          string
	pinTTL, queueTimeout          time.Duration
	loadFactor                    float64
	maxInFlightPerEndpoint, queue int

	drainDelay, shutdownTimeout time.Duration
	replica                     string
	// debugTraceFile: an execution trace of the whole run is written there (a diagnostic; empty,
	// the default, traces nothing).
	debugTraceFile string

	// AgentSession routes (/v1/sessions/{name}/...).
	agentSessions                         bool
	sessionResumeTimeout, sessionActivity time.Duration
	sessionMaxHeld                        int
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", ":8080", "API address (OpenAI HTTP/SSE, WebSocket and gRPC on one port)")
	fs.StringVar(&o.adminListen, "admin-listen", ":9090", "admin address: /metrics, /healthz, /readyz, /pools/<namespace>/<name>/metrics")
	fs.StringVar(&o.tlsCert, "tls-cert-file", "", "serve the API over TLS with this certificate (PEM; re-read when the file changes)")
	fs.StringVar(&o.tlsKey, "tls-key-file", "", "private key of --tls-cert-file")

	fs.StringVar(&o.backends, "backends", "", "static-backends mode: comma-separated model servers (http://host:port) forming one pool; no Kubernetes")
	fs.StringVar(&o.staticModel, "static-model", "", "static-backends mode: the only model id served (empty: every requested model goes to the pool)")
	fs.StringVar(&o.staticPool, "static-pool", "static", "static-backends mode: the pool's name (metrics, headers, /pools/<name>/metrics)")

	fs.StringVar(&o.namespaces, "namespaces", "", "Kubernetes mode: comma-separated namespaces to watch (empty: all)")
	fs.StringVar(&o.auth, "auth", "", "authentication: required (Tenants' API keys and OIDC; the default with Kubernetes) or none (every caller is anonymous with access to every model; the default with --backends)")
	fs.StringVar(&o.hashNS, "api-key-hashes-namespace", "", "Kubernetes mode with --auth=required: read the API-key hashes the controller publishes in this namespace (its --api-key-hashes-namespace; ConfigMaps labelled neuronetes.io/api-key-hashes) and no Secret (empty: read the API-key Secrets themselves)")
	fs.StringVar(&o.anonNS, "anonymous-namespace", "", "with --auth=none and Kubernetes: the one namespace whose pools anonymous callers reach (required there)")

	fs.StringVar(&o.dispatchToken, "dispatcher-token-file", "", "file holding the NeuroNetes dispatcher's bearer token (at least 32 bytes): with it the dispatcher names the ToolBinding's AgentPool (header X-Neuronetes-Target-Pool) and is served by that pool alone (empty: no dispatcher credential; a request naming a target pool is refused)")
	fs.StringVar(&o.sessionKeyFile, "session-key-file", "", "file holding the secret (at least 32 bytes) that scopes session keys by tenant (HMAC): every replica must hold the same one; required with --redis-addr (empty: a secret of this process, so pins, rollout assignments and agents' session memory keys change on restart)")
	fs.StringVar(&o.redisAddr, "redis-addr", "", "Redis host:port shared by the gateway replicas for session pins, session activity and quotas (empty: in memory, per replica)")
	o.redisConn.Register(fs)
	fs.StringVar(&o.redisPrefix, "redis-prefix", "nn:gw:", "prefix of the gateway's Redis keys")
	fs.DurationVar(&o.redisTimeout, "redis-timeout", 100*time.Millisecond, "bound of one Redis call on the request path; beyond it routing falls back to load balancing")
	fs.StringVar(&o.quotaFailure, "quota-store-failure", "open", "when the quota store (Redis) fails: open (admit) or closed (503)")
	fs.StringVar(&o.blockedAnswer, "blocked-answer", "content_filter", "how a guardrail block is answered: content_filter (200, finish_reason content_filter, as OpenAI) or error (400 content_blocked/content_filter, streams end with an error event)")

	fs.DurationVar(&o.connectTimeout, "connect-timeout", 2*time.Second, "backend connect timeout")
	fs.DurationVar(&o.firstTokenTimeout, "first-token-timeout", 60*time.Second, "streamed requests: longest wait for the first event")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 30*time.Second, "streamed requests: longest wait between two events")
	fs.DurationVar(&o.responseTimeout, "response-timeout", 10*time.Minute, "non-streamed requests: longest wait for the whole response")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", 8<<20, "largest request body (413 above)")
	fs.Int64Var(&o.maxResponseBytes, "max-response-bytes", 16<<20, "largest non-streamed backend response")
	fs.DurationVar(&o.writeTimeout, "write-timeout", 30*time.Second, "longest a client may take to accept one write before it is dropped")
	fs.StringVar(&o.wsOrigins, "websocket-origins", "", "comma-separated Origin host patterns accepted on WebSocket upgrades besides the request's host")

	fs.DurationVar(&o.scrapeInterval, "scrape-interval", time.Second, "how often each endpoint's model-server metrics are scraped (0 disables the queue and KV scorers)")
	fs.IntVar(&o.prefixBlockBytes, "prefix-block-bytes", 256, "prefix index block size in bytes of prompt text (about a quarter as many tokens)")
	fs.IntVar(&o.prefixEntries, "prefix-max-blocks", 1<<17, "prefix index capacity in blocks (LRU)")
	fs.StringVar(&o.pickStrategy, "pick-strategy", pick.StrategySoonest, "how an unpinned request's pod is picked: soonest (least queued uncached prefill plus its own uncached prompt; the scorers break ties) or weighted (the best weighted score of the scorers)")
	fs.StringVar(&o.kvEventsHash, "kv-events-hash", "", "subscribe to the KV-cache events of every endpoint that names a KV event port and index each such pod's cache exactly, hashing prompts as the pods' engine does: demo (the demo agent's tokenizer and block hash); empty subscribes to nothing")
	fs.IntVar(&o.maxPins, "max-memory-pins", 1_000_000, "session pins kept in memory (LRU)")
	fs.IntVar(&o.shadowParallel, "shadow-parallel", 64, "shadow (mirrored) requests in flight; more are dropped")

	def := route.DefaultPolicy()
	fs.StringVar(&o.sessionKeys, "session-keys", keySourcesString(def.SessionKeys), "default session key sources in order: header:<name>, body:conversation_id, body:user, body:metadata.<key>")
	fs.StringVar(&o.weights, "scorer-weights", "prefill=4,prefix=1,queue=1,kv=1,inflight=1,hash=1", "default scorer weights")
	fs.DurationVar(&o.pinTTL, "pin-ttl", def.PinTTL, "default session pin TTL, refreshed on use")
	fs.Float64Var(&o.loadFactor, "load-factor", def.LoadFactor, "default ε of bounded-load consistent hashing")
	fs.IntVar(&o.maxInFlightPerEndpoint, "max-inflight-per-endpoint", def.MaxInFlightPerEndpoint, "default in-flight requests per endpoint before requests queue")
	fs.IntVar(&o.queue, "max-queue", def.MaxQueue, "default bound of queued requests per pool")
	fs.DurationVar(&o.queueTimeout, "queue-timeout", def.QueueTimeout, "default longest queue wait")

	fs.BoolVar(&o.agentSessions, "agent-sessions", false, "Kubernetes mode: serve POST /v1/sessions/<name>/chat/completions and /completions, routing to the caller's namespace's AgentSession <name>, recording its activity (annotation session.neuronetes.io/last-activity; needs get, list, watch and patch of agentsessions) and holding requests while it resumes; and route each conversation of an AgentPool with spec.sessions to an AgentSession of its own, created on its first request (needs create of agentsessions)")
	fs.DurationVar(&o.sessionResumeTimeout, "session-resume-timeout", 60*time.Second, "with --agent-sessions: longest a request waits for its session to start or resume (then 504 session_resume_timeout)")
	fs.IntVar(&o.sessionMaxHeld, "session-max-held", 1000, "with --agent-sessions: requests this replica holds at once for sessions to resume (beyond: 503 session_hold_full)")
	fs.DurationVar(&o.sessionActivity, "session-activity-interval", 10*time.Second, "with --agent-sessions: least time between two activity writes of one running session by this replica")

	host, _ := os.Hostname()
	fs.StringVar(&o.replica, "replica-name", host, "this replica's name in the X-Neuronetes-Gateway response header (default: the host name, the pod's name in Kubernetes; empty sends none)")
	fs.DurationVar(&o.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, how long /readyz fails before the listener closes")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 50*time.Second, "after the drain delay, how long open streams may run")
	fs.StringVar(&o.debugTraceFile, "debug-trace-file", "", "diagnostic: write a Go execution trace (runtime/trace, for `go tool trace`) of the whole run to this file, ended at shutdown; it costs CPU on every request, so leave it empty (the default, no trace) in production")
}

func keySourcesString(ks []route.KeySource) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k.String()
	}
	return strings.Join(parts, ",")
}

func (o *options) static() bool { return o.backends != "" }

func (o *options) mode() string {
	if o.static() {
		return "static-backends"
	}
	return "kubernetes"
}

// validate checks the flags; every error names its flag.
func (o *options) validate() error {
	if o.auth == "" {
		o.auth = "required"
		if o.static() {
			o.auth = "none"
		}
	}
	var errs []error
	if o.auth != "required" && o.auth != "none" {
		errs = append(errs, fmt.Errorf("--auth must be required or none, got %q", o.auth))
	}
	if o.static() && o.auth == "required" {
		errs = append(errs, errors.New("--auth=required needs Kubernetes (Tenants); static-backends mode serves anonymous callers"))
	}
	switch {
	case o.anonNS != "" && (o.static() || o.auth != "none"):
		errs = append(errs, errors.New("--anonymous-namespace applies only with --auth=none in Kubernetes mode"))
	case !o.static() && o.auth == "none" && o.anonNS == "":
		errs = append(errs, errors.New("--auth=none in Kubernetes mode needs --anonymous-namespace: the namespace whose pools anonymous callers may use"))
	case o.anonNS != "" && len(validation.IsDNS1123Label(o.anonNS)) > 0:
		errs = append(errs, fmt.Errorf("--anonymous-namespace %q is not a namespace name", o.anonNS))
	}
	if o.hashNS != "" && (o.static() || o.auth != "required" || len(validation.IsDNS1123Label(o.hashNS)) > 0) {
		errs = append(errs, fmt.Errorf("--api-key-hashes-namespace %q: a namespace name, only with --auth=required in Kubernetes mode", o.hashNS))
	}
	if o.quotaFailure != "open" && o.quotaFailure != "closed" {
		errs = append(errs, fmt.Errorf("--quota-store-failure must be open or closed, got %q", o.quotaFailure))
	}
	if o.blockedAnswer != "content_filter" && o.blockedAnswer != "error" {
		errs = append(errs, fmt.Errorf("--blocked-answer must be content_filter or error, got %q", o.blockedAnswer))
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file go together"))
	}
	if o.static() {
		if _, err := route.ParseBackends(o.backends); err != nil {
			errs = append(errs, fmt.Errorf("--backends: %w", err))
		}
	}
	if _, err := o.defaultPolicy(); err != nil {
		errs = append(errs, err)
	}
	if o.loadFactor < 0 {
		errs = append(errs, fmt.Errorf("--load-factor must not be negative, got %v", o.loadFactor))
	}
	for name, v := range map[string]int{"--max-inflight-per-endpoint": o.maxInFlightPerEndpoint, "--prefix-block-bytes": o.prefixBlockBytes,
		"--prefix-max-blocks": o.prefixEntries, "--max-memory-pins": o.maxPins, "--shadow-parallel": o.shadowParallel} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	if o.agentSessions && o.static() {
		errs = append(errs, errors.New("--agent-sessions needs Kubernetes mode (AgentSessions), not --backends"))
	}
	if o.sessionResumeTimeout <= 0 || o.sessionActivity <= 0 || o.sessionMaxHeld <= 0 {
		errs = append(errs, errors.New("--session-resume-timeout, --session-activity-interval and --session-max-held must be positive"))
	}
	if o.queue < 0 {
		errs = append(errs, fmt.Errorf("--max-queue must not be negative, got %d", o.queue))
	}
	if o.pickStrategy != pick.StrategySoonest && o.pickStrategy != pick.StrategyWeighted {
		errs = append(errs, fmt.Errorf("--pick-strategy must be %s or %s, got %q", pick.StrategySoonest, pick.StrategyWeighted, o.pickStrategy))
	}
	if o.kvEventsHash != "" && o.kvEventsHash != kvindex.HashDemo {
		errs = append(errs, fmt.Errorf("--kv-events-hash must be empty or %s, got %q (no other engine's hashing is implemented)", kvindex.HashDemo, o.kvEventsHash))
	}
	if o.maxBodyBytes <= 0 || o.maxResponseBytes <= 0 {
		errs = append(errs, errors.New("--max-body-bytes and --max-response-bytes must be positive"))
	}
	if o.redisAddr != "" && o.sessionKeyFile == "" {
		errs = append(errs, errors.New("--session-key-file is required with --redis-addr: replicas sharing pins must scope session keys with the same secret"))
	}
	if o.redisConn.PasswordFile != "" {
		if _, err := os.Stat(o.redisConn.PasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("--redis-password-file: %w", err))
		}
	}
	if err := o.redisConn.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// defaultPolicy is the policy of pools without a RoutingPolicy, from the flags.
func (o *options) defaultPolicy() (route.Policy, error) {
	p := route.DefaultPolicy()
	keys, err := route.ParseKeySources(o.sessionKeys)
	if err != nil {
		return p, fmt.Errorf("--session-keys: %w", err)
	}
	w, err := route.ParseWeights(o.weights, p.Weights)
	if err != nil {
		return p, fmt.Errorf("--scorer-weights: %w", err)
	}
	p.SessionKeys, p.Weights = keys, w
	p.PinTTL, p.LoadFactor = o.pinTTL, o.loadFactor
	p.MaxInFlightPerEndpoint, p.MaxQueue, p.QueueTimeout = o.maxInFlightPerEndpoint, o.queue, o.queueTimeout
	return p, nil
}
