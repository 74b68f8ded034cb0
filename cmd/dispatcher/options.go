package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/dispatcher/toolproxy"
	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/internal/kafkaconn"
	"github.com/neuronetes/neuronetes/internal/redisconn"
)

// options are the command-line flags.
type options struct {
	namespaces        string
	gatewayURL        string
	dispatchTokenFile string
	gatewayKeyFile    string
	redisAddr         string
	redisPrefix       string
	natsURL           string
	kafkaURL          string
	redisQueueURL     string
	adminListen       string
	toolListen        string
	member            string
	drainTimeout      time.Duration
	statusPeriod      time.Duration
	auditLog          string
	idemKeyFile       string
	// redisConn: --redis-username, --redis-password-file, --redis-tls, ...
	redisConn redisconn.Flags
	// queueURLFromAddr: redisQueueURL defaulted to --redis-addr, so it gets redisConn too.
	queueURLFromAddr bool

	staticBindings string
	staticModel    string
	staticReady    int
	toolCallers    string

	// egress is the policy of ToolBinding endpoints (chart egress.*).
	egress egress.Flags
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.namespaces, "namespaces", "", "comma-separated namespaces whose ToolBindings are served (default all)")
	fs.StringVar(&o.gatewayURL, "gateway-url", "", "base URL of the gateway API, e.g. http://neuronetes-gateway.neuronetes-system:8080 (required)")
	fs.StringVar(&o.dispatchTokenFile, "gateway-dispatch-token-file", "", "file holding the dispatcher's own gateway credential, the gateway's --dispatcher-token-file (default $NEURONETES_GATEWAY_DISPATCH_TOKEN): each call then names the ToolBinding's AgentPool and is served by it alone, in any namespace; without it the API key's Tenant is used and the gateway routes by model in that Tenant's namespace")
	fs.StringVar(&o.gatewayKeyFile, "gateway-api-key-file", "", "file holding the API key sent to the gateway (default $NEURONETES_GATEWAY_API_KEY; empty: no key)")
	fs.StringVar(&o.redisAddr, "redis-addr", "", "Redis host:port for dedupe records, shared status and idempotency keys (required)")
	o.redisConn.Register(fs)
	fs.StringVar(&o.redisPrefix, "redis-prefix", "nn:dispatch:", "prefix of the dispatcher's Redis keys")
	fs.StringVar(&o.natsURL, "nats-url", "", "NATS server of ToolBindings that name no queueConfig.url")
	fs.StringVar(&o.kafkaURL, "kafka-url", "", "Kafka brokers of ToolBindings that name no queueConfig.url: host:port[,...], kafka://host:port[,...], or kafkas://[user:pass@]host:port[,...][?sasl=plain|scram-sha-256|scram-sha-512] (TLS, SASL)")
	fs.StringVar(&o.redisQueueURL, "redis-queue-url", "", "Redis (redis://host:port/db) of redis-provider ToolBindings that name no queueConfig.url (default --redis-addr)")
	fs.StringVar(&o.adminListen, "admin-listen", ":9091", "address of /metrics, /healthz, /readyz and /audit")
	fs.StringVar(&o.toolListen, "tool-listen", ":8091", "address of the tool proxy (POST /v1/tools/<namespace>/<tool>; empty disables)")
	fs.StringVar(&o.member, "member", "", "this replica's name in consumer groups and leases (default $POD_NAME, else the host name)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 25*time.Second, "after SIGTERM, how long messages in flight get to finish before they are left to the broker")
	fs.DurationVar(&o.statusPeriod, "status-period", 5*time.Second, "period of status, liveness and lag reporting (a replica silent for 3 periods counts as gone)")
	fs.StringVar(&o.idemKeyFile, "idempotency-key-file", "", "file holding the 32-byte key (raw or base64) that seals stored tool answers in Redis; every replica needs the same one (default $NEURONETES_IDEMPOTENCY_KEY, base64; neither: a random key of this process, so only this replica can replay its answers)")
	fs.StringVar(&o.auditLog, "audit-log", "-", "file receiving one JSON line per tool call (- for stdout, empty for none)")
	fs.StringVar(&o.staticBindings, "static-bindings", "", "static mode (no Kubernetes): a YAML file of ToolBindings to serve")
	fs.StringVar(&o.staticModel, "static-model", "", "static mode: the model requested for the queue bindings' pool")
	fs.IntVar(&o.staticReady, "static-pool-replicas", 1, "static mode: ready replicas assumed for the pool (sets the in-flight limit with prefetchCount)")
	o.egress.Register(fs)
	fs.StringVar(&o.toolCallers, "tool-callers", "", "static mode: tool callers as ip=namespace/pool,... (Kubernetes mode verifies the pod's projected token instead)")
}

func (o *options) validate() error {
	var errs []error
	if o.gatewayURL == "" {
		errs = append(errs, errors.New("--gateway-url is required"))
	}
	if o.redisAddr == "" {
		errs = append(errs, errors.New("--redis-addr is required (dedupe records)"))
	}
	if o.drainTimeout < 0 || o.statusPeriod <= 0 {
		errs = append(errs, errors.New("--drain-timeout must be >= 0 and --status-period > 0"))
	}
	if o.staticBindings != "" && o.staticModel == "" {
		errs = append(errs, errors.New("--static-model is required with --static-bindings"))
	}
	if o.staticBindings == "" && (o.staticModel != "" || o.toolCallers != "") {
		errs = append(errs, errors.New("--static-model and --tool-callers need --static-bindings"))
	}
	if o.staticReady < 1 {
		errs = append(errs, fmt.Errorf("--static-pool-replicas must be >= 1, got %d", o.staticReady))
	}
	if _, err := parseCallers(o.toolCallers); err != nil {
		errs = append(errs, err)
	}
	if _, err := o.egress.Policy(); err != nil {
		errs = append(errs, err)
	}
	if o.kafkaURL != "" {
		if _, err := kafkaconn.ParseURL("--kafka-url", o.kafkaURL); err != nil {
			errs = append(errs, err)
		}
	}
	if o.member == "" {
		o.member = os.Getenv("POD_NAME")
	}
	if o.member == "" {
		h, _ := os.Hostname()
		o.member = h
	}
	if o.redisQueueURL == "" && o.redisAddr != "" {
		o.redisQueueURL = "redis://" + o.redisAddr
		o.queueURLFromAddr = true
	}
	if err := o.redisConn.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dispatchToken reads the dispatcher's gateway credential: the file, else
// $NEURONETES_GATEWAY_DISPATCH_TOKEN ("" without either).
func (o *options) dispatchToken() (string, error) {
	tok := os.Getenv("NEURONETES_GATEWAY_DISPATCH_TOKEN")
	if o.dispatchTokenFile != "" {
		b, err := os.ReadFile(o.dispatchTokenFile)
		if err != nil {
			return "", fmt.Errorf("--gateway-dispatch-token-file: %w", err)
		}
		tok = string(b)
	}
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", nil
	}
	if len(tok) < 32 {
		return "", fmt.Errorf("--gateway-dispatch-token-file: %s holds %d bytes, want at least 32", o.dispatchTokenFile, len(tok))
	}
	return tok, nil
}

// gatewayKey reads the API key.
func (o *options) gatewayKey() (string, error) {
	if o.gatewayKeyFile == "" {
		return os.Getenv("NEURONETES_GATEWAY_API_KEY"), nil
	}
	b, err := os.ReadFile(o.gatewayKeyFile)
	if err != nil {
		return "", fmt.Errorf("--gateway-api-key-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// idemSealer returns the sealer of stored tool answers.
func (o *options) idemSealer() (*toolproxy.IdemSealer, error) {
	if o.idemKeyFile != "" {
		k, err := toolproxy.LoadIdemKey(o.idemKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--idempotency-key-file: %w", err)
		}
		return toolproxy.NewIdemSealer(k)
	}
	if env := os.Getenv("NEURONETES_IDEMPOTENCY_KEY"); env != "" {
		k, err := toolproxy.ParseIdemKey([]byte(env))
		if err != nil {
			return nil, fmt.Errorf("$NEURONETES_IDEMPOTENCY_KEY: %w", err)
		}
		return toolproxy.NewIdemSealer(k)
	}
	klog.Background().Info("No idempotency key: stored tool answers are sealed with a key of this process, replayable by this replica only")
	return toolproxy.RandomIdemSealer()
}

// caller is a static tool caller.
type caller struct{ ns, pool string }

func parseCallers(s string) (map[string]caller, error) {
	out := map[string]caller{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		ip, np, ok := strings.Cut(strings.TrimSpace(part), "=")
		ns, pool, ok2 := strings.Cut(np, "/")
		if !ok || !ok2 || ip == "" || ns == "" || pool == "" {
			return nil, fmt.Errorf("--tool-callers: %q is not ip=namespace/pool", part)
		}
		out[ip] = caller{ns, pool}
	}
	return out, nil
}
