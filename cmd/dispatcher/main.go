// Command dispatcher serves ToolBindings: it consumes the queues of dispatched queue bindings
// (NATS JetStream, Kafka, Redis Streams) and sends each message to the bound AgentPool through
// the gateway, publishing the result before acknowledging the message, and it proxies calls to
// http and grpc tool bindings. See docs/dispatcher.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/dispatcher/binding"
	"github.com/neuronetes/neuronetes/dispatcher/dedupe"
	"github.com/neuronetes/neuronetes/dispatcher/gwclient"
	"github.com/neuronetes/neuronetes/dispatcher/metrics"
	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/kafkaq"
	"github.com/neuronetes/neuronetes/dispatcher/queue/natsq"
	"github.com/neuronetes/neuronetes/dispatcher/queue/redisq"
	"github.com/neuronetes/neuronetes/dispatcher/toolproxy"
	"github.com/neuronetes/neuronetes/dispatcher/worker"
	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/internal/serving"
)

func main() {
	klog.InitFlags(nil)
	o := options{}
	o.register(flag.CommandLine)
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "dispatcher: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("dispatcher"))
	if err := run(ctx, &o); err != nil {
		klog.FromContext(ctx).Error(err, "Dispatcher failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// app is the assembled dispatcher.
type app struct {
	o         *options
	reg       *prometheus.Registry
	metrics   *metrics.Metrics
	redis     *redis.Client
	store     dedupe.Store
	counts    *dedupe.Batcher
	providers map[string]queue.Provider
	manager   *binding.Manager
	reporter  *binding.Reporter
	tools     *toolproxy.Registry
	proxy     *toolproxy.Proxy
	ready     func() bool
	stopping  atomic.Bool
}

func assemble(o *options) (*app, error) {
	dtok, err := o.dispatchToken()
	if err != nil {
		return nil, err
	}
	key, err := o.gatewayKey()
	if err != nil {
		return nil, err
	}
	sealer, err := o.idemSealer()
	if err != nil {
		return nil, err
	}
	a := &app{o: o, reg: prometheus.NewRegistry(), tools: toolproxy.NewRegistry(), ready: func() bool { return true }}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.metrics = metrics.New(a.reg)
	ro := &redis.Options{Addr: o.redisAddr, PoolSize: 256}
	if err := o.redisConn.Apply(ro); err != nil {
		return nil, err
	}
	a.redis = redis.NewClient(ro)
	a.store = dedupe.NewRedis(a.redis, o.redisPrefix)
	a.counts = &dedupe.Batcher{Store: a.store}
	pol, err := o.egress.Policy()
	if err != nil {
		return nil, err
	}
	dial := queuePolicy(pol, o).Dialer(egress.DefaultDialTimeout)
	np := &natsq.Provider{DefaultURL: o.natsURL, ClientName: "neuronetes-dispatcher-" + o.member, Dial: dial}
	rq := a.redisQueue()
	rq.Dial = dial
	a.providers = map[string]queue.Provider{"nats": np, "kafka": &kafkaq.Provider{DefaultURL: o.kafkaURL, Dial: dial}, "redis": rq}
	a.reporter = &binding.Reporter{Redis: a.redis, Prefix: o.redisPrefix, Member: o.member, Store: a.store, Period: o.statusPeriod,
		Tools: a.tools.Health, Lag: a.lag, Gauges: a.gauges}
	a.manager = binding.NewManager(binding.Deps{Providers: a.providers, Store: a.store, Member: o.member, Counts: a.counts,
		Caller: &gwclient.Client{BaseURL: o.gatewayURL, APIKey: key, DispatchToken: dtok}, Peers: a.reporter.Peers,
		Observer: func(s binding.Spec) worker.Observer {
			return a.metrics.ForBinding(s.Key.String(), s.Key.Name, s.Provider, s.AgentClass)
		}})
	a.reporter.Manager = a.manager
	a.proxy = &toolproxy.Proxy{Registry: a.tools, Invoker: &toolproxy.Invokers{Egress: pol}, Metrics: a.metrics,
		Idem: &toolproxy.RedisIdem{Client: a.redis, Prefix: o.redisPrefix, Sealer: sealer}, Audit: &toolproxy.Audit{Out: auditOut(o.auditLog)}}
	return a, nil
}

func auditOut(path string) io.Writer {
	switch path {
	case "":
		return nil
	case "-":
		return os.Stdout
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		klog.Background().Error(err, "Audit log not opened; writing to stdout", "path", path)
		return os.Stdout
	}
	return f
}

func (a *app) lag(ctx context.Context, s binding.Spec) (int64, error) {
	p := a.providers[s.Provider]
	if p == nil {
		return 0, fmt.Errorf("provider %s not served", s.Provider)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.Lag(ctx, queue.Options{URL: s.URL, Queue: s.Queue, Group: s.Group})
}

func (a *app) gauges(s binding.Spec, lag, inFlight int64) {
	a.metrics.Lag.WithLabelValues(s.Key.String()).Set(float64(lag))
	a.metrics.InFlight.WithLabelValues(s.Key.String()).Set(float64(inFlight))
}

func run(ctx context.Context, o *options) error {
	log := klog.FromContext(ctx)
	a, err := assemble(o)
	if err != nil {
		return err
	}
	defer a.close()
	if err := a.redis.Ping(ctx).Err(); err != nil {
		log.Info("Redis not reachable yet; dedupe calls will retry", "addr", o.redisAddr, "err", err)
	}
	if o.staticBindings != "" {
		err = a.startStatic(ctx)
	} else {
		err = a.startKube(ctx)
	}
	if err != nil {
		return err
	}
	servers, err := a.serve(ctx)
	if err != nil {
		return err
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go a.reporter.Run(context.WithoutCancel(rctx))
	go a.counts.Run(context.WithoutCancel(rctx), time.Second)
	<-ctx.Done()
	a.stopping.Store(true)
	log.Info("Stopping: draining messages in flight", "timeout", o.drainTimeout)
	a.manager.StopAll(context.Background(), o.drainTimeout)
	rcancel()
	_ = a.counts.Flush(context.Background())
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	return nil
}

func (a *app) close() {
	for _, p := range a.providers {
		if c, ok := p.(interface{ Close() }); ok {
			c.Close()
		}
	}
	if iv, ok := a.proxy.Invoker.(*toolproxy.Invokers); ok {
		iv.Close()
	}
	_ = a.redis.Close()
}

// serve starts the admin and tool servers.
func (a *app) serve(ctx context.Context) ([]*http.Server, error) {
	admin := http.NewServeMux()
	admin.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	admin.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	admin.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if a.stopping.Load() || !a.ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	admin.Handle("/audit", a.proxy.Audit)
	servers := []*http.Server{serving.Admin().Server(a.o.adminListen, admin)}
	if a.o.toolListen != "" {
		tools := http.NewServeMux()
		tools.Handle("/v1/tools/", a.proxy)
		servers = append(servers, serving.Stream(0).Server(a.o.toolListen, tools))
	}
	for _, s := range servers {
		l, err := net.Listen("tcp", s.Addr)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", s.Addr, err)
		}
		go func() {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.FromContext(ctx).Error(err, "Server stopped", "addr", s.Addr)
			}
		}()
	}
	return servers, nil
}

// redisQueue is the Redis Streams provider; its default URL gets the dispatcher's Redis
// credentials and TLS when it is --redis-addr.
func (a *app) redisQueue() *redisq.Provider {
	p := &redisq.Provider{DefaultURL: a.o.redisQueueURL}
	if a.o.queueURLFromAddr {
		p.DefaultConn = a.o.redisConn.Apply
	}
	return p
}
