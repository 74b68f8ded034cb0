// Package kafkaconn parses the Kafka URL of a ToolBinding (queueConfig.url) or of a --kafka-url
// flag into franz-go client options shared by every Kafka client of NeuroNetes (the
// dispatcher's kafka provider, the autoscaler's queue lag): the seed brokers, TLS and SASL, and
// a dialer that does the TLS handshake over the injected (egress policy's) connection.
//
// URL forms:
//
//	host:port[,host:port...]                   plaintext
//	kafka://host:port[,host:port...]           plaintext
//	kafkas://[user:pass@]host:port[,...][?sasl=plain|scram-sha-256|scram-sha-512]
//	                                           TLS (server name: the host dialed; system roots)
//
// A port left out is 9092. User and password may be percent-encoded; with them the client
// authenticates with SASL (mechanism: ?sasl=, default plain). Credentials are refused on a
// plaintext URL.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/neuronetes/neuronetes/internal/credurl"
	"github.com/neuronetes/neuronetes/internal/tlsdial"
)

// Dialer connects to a broker: for a URL a user chose, the egress policy's dialer
// (internal/egress).
type Dialer = tlsdial.Dialer

// DefaultPort is the port of a seed that names none.
const DefaultPort = "9092"

// DialTimeout bounds one connection to a broker, its TLS handshake included.
const DialTimeout = 10 * time.Second

// SASL mechanism names of the sasl query parameter.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// Options are the connection settings of a parsed Kafka URL.
type Options struct {
	// Seeds are the bootstrap brokers, host:port each.
	Seeds []string
	// TLS is the client configuration of a kafkas:// URL (nil: plaintext): TLS 1.2 or later,
	// the server name checked is the host dialed, RootCAs nil means the system roots.
	TLS *tls.Config
	// SASL authenticates every connection (nil: no credentials in the URL).
	SASL sasl.Mechanism

	user, pass, mechanism string
	redacted              string
}

// String is the URL with its password replaced by "xxxxx", for logs and errors.
func (o *Options) String() string { return o.redacted }

// ParseURL parses a Kafka URL (see the package comment); field names the setting in the error
// ("queueConfig.url", "--kafka-url"). Errors show the URL with its password redacted.
func ParseURL(field, raw string) (*Options, error) {
	o := &Options{redacted: credurl.Redact(raw)}
	fail := func(format string, args ...any) (*Options, error) {
		return nil, fmt.Errorf("%s %q: %s", field, o.redacted, fmt.Sprintf(format, args...))
	}
	scheme, rest := "kafka", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = strings.ToLower(raw[:i]), raw[i+3:]
	}
	switch scheme {
	case "kafka":
	case "kafkas":
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	default:
		return fail("unknown scheme %q (kafka:// or kafkas://)", scheme)
	}
	authority, query := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, query = rest[:i], rest[i:]
		if strings.HasPrefix(query, "/") {
			query = strings.TrimPrefix(query, "/")
			if query != "" && query[0] != '?' {
				return fail("a Kafka URL has no path")
			}
		}
		if strings.Contains(query, "#") {
			return fail("a Kafka URL has no fragment")
		}
		query = strings.TrimPrefix(query, "?")
	}
	hosts := authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		if err := o.setUserinfo(authority[:i]); err != nil {
			return fail("%v", err)
		}
		hosts = authority[i+1:]
	}
	if err := o.setQuery(query); err != nil {
		return fail("%v", err)
	}
	if o.user != "" && o.TLS == nil {
		return nil, fmt.Errorf("%s: SASL credentials need kafkas:// (TLS)", field)
	}
	if hosts == "" {
		return fail("no broker (host:port[,host:port...])")
	}
	for _, s := range strings.Split(hosts, ",") {
		seed, err := parseSeed(s)
		if err != nil {
			return fail("%v", err)
		}
		o.Seeds = append(o.Seeds, seed)
	}
	return o, nil
}

// setUserinfo decodes user:pass (each possibly percent-encoded) into the options.
func (o *Options) setUserinfo(ui string) error {
	u, p, ok := strings.Cut(ui, ":")
	if !ok {
		return errors.New("credentials need user:password@")
	}
	var err error
	if o.user, err = url.PathUnescape(u); err != nil {
		return errors.New("user: invalid percent-encoding")
	}
	if o.pass, err = url.PathUnescape(p); err != nil {
		return errors.New("password: invalid percent-encoding")
	}
	if o.user == "" || o.pass == "" {
		return errors.New("credentials need a non-empty user and password")
	}
	return nil
}

// setQuery reads the sasl parameter, the only one, and sets the mechanism.
func (o *Options) setQuery(q string) error {
	vals, err := url.ParseQuery(q)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	for k := range vals {
		if k != "sasl" {
			return fmt.Errorf("unknown parameter %q (only sasl)", k)
		}
	}
	if len(vals["sasl"]) > 1 {
		return errors.New("sasl given more than once")
	}
	m, set := strings.ToLower(vals.Get("sasl")), vals.Has("sasl")
	if set && o.user == "" {
		return errors.New("sasl needs credentials (user:password@)")
	}
	if o.user == "" {
		return nil
	}
	if !set {
		m = SASLPlain
	}
	switch m {
	case SASLPlain:
		o.mechanism, o.SASL = m, plain.Auth{User: o.user, Pass: o.pass}.AsMechanism()
	case SASLScramSHA256:
		o.mechanism, o.SASL = m, scram.Auth{User: o.user, Pass: o.pass}.AsSha256Mechanism()
	case SASLScramSHA512:
		o.mechanism, o.SASL = m, scram.Auth{User: o.user, Pass: o.pass}.AsSha512Mechanism()
	default:
		return fmt.Errorf("unknown sasl %q (%s, %s or %s)", m, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
	return nil
}

// parseSeed checks one host[:port] and returns it as host:port (an IPv6 address in brackets).
func parseSeed(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty broker in the list")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if !errors.As(err, &ae) || ae.Err != "missing port in address" {
			return "", fmt.Errorf("broker %q: %w", s, err)
		}
		host, port = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), DefaultPort
	}
	if host == "" || strings.ContainsAny(host, " /@?#[]") {
		return "", fmt.Errorf("broker %q: bad host", s)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("broker %q: port %q is not a number from 1 to 65535", s, port)
	}
	return net.JoinHostPort(host, port), nil
}

// Opts returns the franz-go client options of o: the seed brokers, SASL when the URL carries
// credentials, and a dialer that connects through dial (nil: a net.Dialer) and, for a
// kafkas:// URL, does the TLS handshake over that connection, so a custom dialer never turns
// a TLS URL into plaintext (kgo.Dialer and kgo.DialTLSConfig do not combine). DialTimeout
// bounds the connection and its handshake.
func (o *Options) Opts(dial Dialer) []kgo.Opt {
	if dial == nil {
		dial = (&net.Dialer{Timeout: DialTimeout}).DialContext
	}
	d := tlsdial.DialTLS("kafka", dial, o.TLS)
	bounded := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, DialTimeout)
		defer cancel()
		return d(ctx, network, addr)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(o.Seeds...), kgo.Dialer(bounded)}
	if o.SASL != nil {
		opts = append(opts, kgo.SASL(o.SASL))
	}
	return opts
}
