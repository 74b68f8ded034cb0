package scaleloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/neuronetes/neuronetes/internal/credurl"
	"github.com/neuronetes/neuronetes/internal/queuelag"
)

// PromSource evaluates PromQL through the Prometheus HTTP API, for the seed's
// externalMetrics and for pools whose metrics are already in Prometheus.
type PromSource struct {
	api promv1.API
}

// NewPromSource returns a source for the Prometheus server at address.
func NewPromSource(address string) (*PromSource, error) {
	c, err := promapi.NewClient(promapi.Config{Address: address})
	if err != nil {
		return nil, fmt.Errorf("prometheus address %q: %w", address, err)
	}
	return &PromSource{api: promv1.NewAPI(c)}, nil
}

// Query evaluates query at now and returns the sum of the resulting vector (or
// the scalar). An empty result is an error, so the metric counts as missing.
func (p *PromSource) Query(ctx context.Context, query string, now time.Time) (float64, error) {
	v, _, _, err := p.api.Query(ctx, query, now)
	if err != nil {
		return 0, fmt.Errorf("prometheus query %q: %w", query, err)
	}
	switch r := v.(type) {
	case model.Vector:
		if len(r) == 0 {
			return 0, fmt.Errorf("prometheus query %q: empty result", query)
		}
		sum := 0.0
		for _, s := range r {
			sum += float64(s.Value)
		}
		return sum, nil
	case *model.Scalar:
		return float64(r.Value), nil
	default:
		return 0, fmt.Errorf("prometheus query %q: unsupported result type %s", query, v.Type())
	}
}

// LagSource reads queue lag from NATS JetStream.
//
// A ToolBinding's queueName is "<stream>" or "<stream>/<consumer>"; the lag is
// internal/queuelag's NATS lag, the dispatcher's definition.
type LagSource struct {
	// Dial connects to NATS servers (a ToolBinding's queueConfig.url is user-chosen: the
	// controller passes the egress policy's dialer); nil dials directly.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds one lookup (default 5 s).
	Timeout time.Duration
	conns   map[string]*nats.Conn
}

// Lag returns the lag of queueName on the NATS server at url.
func (l *LagSource) Lag(ctx context.Context, url, queueName string) (int64, error) {
	if url == "" {
		return 0, errors.New("queueConfig.url: empty NATS URL")
	}
	stream, consumer, _ := strings.Cut(queueName, "/")
	if stream == "" {
		return 0, fmt.Errorf("queueConfig.queueName: empty stream in %q", queueName)
	}
	t := l.Timeout
	if t <= 0 {
		t = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	nc, err := l.conn(url, t)
	if err != nil {
		return 0, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, fmt.Errorf("jetstream %s: %w", credurl.Redact(url), credurl.Error(err, url))
	}
	return queuelag.NATS(ctx, js, stream, consumer)
}

func (l *LagSource) conn(url string, timeout time.Duration) (*nats.Conn, error) {
	if l.conns == nil {
		l.conns = map[string]*nats.Conn{}
	}
	if c, ok := l.conns[url]; ok && c.IsConnected() {
		return c, nil
	}
	opts := []nats.Option{nats.Timeout(timeout), nats.Name("neuronetes-autoscaler")}
	if l.Dial != nil {
		opts = append(opts, nats.SetCustomDialer(ctxDialer{dial: l.Dial, timeout: timeout}))
	}
	c, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", credurl.Redact(url), credurl.Error(err, url))
	}
	l.conns[url] = c
	return c, nil
}

// Close closes the cached connections.
func (l *LagSource) Close() {
	for u, c := range l.conns {
		c.Close()
		delete(l.conns, u)
	}
}

// ctxDialer adapts a context dialer to nats.CustomDialer.
type ctxDialer struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout time.Duration
}

func (d ctxDialer) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	return d.dial(ctx, network, addr)
}
