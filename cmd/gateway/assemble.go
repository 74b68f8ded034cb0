package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/auth"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/front"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionkey"
)

// assemble builds the gateway and starts its background loops.
func assemble(ctx context.Context, o *options) (*gw, error) {
	g := &gw{o: o, reg: prometheus.NewRegistry(), stats: metrics.NewPoolStats()}
	g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(g.reg)
	pol, err := o.defaultPolicy()
	if err != nil {
		return nil, err
	}

	var rc redis.UniversalClient // nil without --redis-addr (never a nil *redis.Client)
	if c, err := o.redisClient(); err != nil {
		return nil, err
	} else if c != nil {
		rc = c
	}
	sessions := sessionkey.Random()
	if o.sessionKeyFile != "" {
		if sessions, err = sessionkey.Load(o.sessionKeyFile); err != nil {
			return nil, fmt.Errorf("--session-key-file: %w", err)
		}
	} else {
		klog.FromContext(ctx).Info("No --session-key-file: session keys are scoped with a secret of this process; pins, rollout assignments and agents' session memory do not survive a restart")
	}
	g.pins = &affinity.Store{Mem: affinity.NewMemory(o.maxPins, nil), Timeout: o.redisTimeout,
		OnError: func(op string, _ error) { m.StoreErrors.WithLabelValues("pins", op).Inc() }}
	var qstore quota.Store = quota.NewMemory()
	if rc != nil {
		g.pins.Redis = affinity.NewRedisTable(rc, o.redisPrefix)
		qstore = quota.NewRedis(rc, o.redisPrefix)
	}
	g.limiter = &quota.Limiter{Store: qstore, FailOpen: o.quotaFailure == "open", Timeout: o.redisTimeout,
		OnStoreError: func(error) { m.StoreErrors.WithLabelValues("quota", "admit").Inc() }}

	g.table = route.NewTable(nil)
	if o.static() {
		eps, _ := route.ParseBackends(o.backends)
		g.table.Store(route.NewStaticSnapshot(&route.Pool{Ref: route.PoolRef{Name: o.staticPool},
			Model: o.staticModel, Endpoints: eps, Policy: pol}))
		g.ready = func() bool { return true }
	}
	load := pick.NewLoad()
	picker := &pick.Picker{Load: load, Prefix: pick.NewPrefixIndex(o.prefixBlockBytes, o.prefixEntries), Strategy: o.pickStrategy}
	if o.kvEventsHash != "" {
		g.kv = &kvindex.Subscriber{Index: &kvindex.Index{},
			OnResult: func(r kvindex.Result) { m.KVEvents.WithLabelValues(kvResult(r)).Inc() },
			OnError:  func(error) { m.KVEvents.WithLabelValues("error").Inc() }}
		picker.KV = g.kv.Index
	}
	if o.scrapeInterval > 0 {
		g.scraper = &pick.Scraper{Table: g.table, Interval: o.scrapeInterval}
		picker.Metrics = g.scraper
	}
	g.eng = &engine.Engine{Table: g.table, Pins: g.pins, Picker: picker, Quota: g.limiter,
		Admission: quota.NewAdmission(), Peers: &quota.Peers{Client: rc, Prefix: o.redisPrefix}, Metrics: m, Pools: g.stats,
		Upstream: proxy.NewUpstream(proxy.Timeouts{Connect: o.connectTimeout, FirstToken: o.firstTokenTimeout,
			Idle: o.idleTimeout, Response: o.responseTimeout}),
		Cfg: engine.Config{MaxResponseBytes: o.maxResponseBytes, ShadowParallel: o.shadowParallel,
			BlockedAsError: o.blockedAnswer == "error"}, Replica: o.replica,
		Sessions: sessions}
	picker.Replicas = g.eng.Peers.Count
	if g.kv != nil {
		g.eng.KVPrompt = kvindex.DemoPrompt // --kv-events-hash=demo, the only one
	}
	if o.dispatchToken != "" {
		d, err := loadDispatcher(o.dispatchToken)
		if err != nil {
			return nil, fmt.Errorf("--dispatcher-token-file: %w", err)
		}
		g.eng.Dispatcher = d
	}
	var synced []func() bool
	deps := extensionDeps{Registerer: g.reg, Static: o.static(), Redis: rc, RedisPrefix: o.redisPrefix, Sessions: sessions,
		WaitFor: func(s func() bool) {
			if s != nil {
				synced = append(synced, s)
			}
		}}
	start := func() {}
	if !o.static() {
		if start, err = startKube(ctx, g, pol, &deps); err != nil {
			return nil, err
		}
	}
	ext, err := buildExtensions(ctx, deps)
	if err != nil {
		return nil, fmt.Errorf("extensions: %w", err)
	}
	g.ready = allReady(append([]func() bool{g.ready}, synced...))
	start()
	g.eng.Ext = ext
	g.adminHandlers = ext.AdminHandlers
	g.eng.Init()
	g.front = &front.Server{Engine: g.eng, MaxBodyBytes: o.maxBodyBytes, WriteTimeout: o.writeTimeout,
		WebSocketOrigins: splitList(o.wsOrigins), Handlers: ext.Handlers}
	g.front.Init()
	g.background(ctx)
	return g, nil
}

// background starts the loops: scrapes, pin write-back, lease refresh, token rates and the
// endpoint gauges.
func (g *gw) background(ctx context.Context) {
	if g.scraper != nil {
		go g.scraper.Run(ctx)
	}
	go g.pins.Run(ctx, time.Second)
	go g.limiter.Run(ctx)
	go g.eng.Peers.Run(ctx)
	g.syncKV(ctx)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.eng.Metrics.UpdateRates()
				g.tableChanged()
				g.syncKV(ctx)
			}
		}
	}()
}

// tableChanged refreshes what depends on the endpoints: the endpoint gauges, the admission
// capacities and the per-pod views of pods that left.
func (g *gw) tableChanged() {
	for _, p := range g.table.Load().Pools() {
		g.eng.Metrics.Endpoints.WithLabelValues(p.Ref.String()).Set(float64(len(p.Endpoints)))
		g.eng.Admission.Resize(p.Ref, len(p.Endpoints)*p.Policy.MaxInFlightPerEndpoint)
		keep := make(map[string]bool, len(p.Endpoints))
		for _, e := range p.Endpoints {
			keep[e.Pod] = true
		}
		g.stats.Forget(p.Ref, keep)
		g.eng.Picker.Load.ForgetLanes(p.Ref, keep)
	}
}

// syncKV subscribes to the KV events of every routable endpoint that publishes them and stops
// the subscriptions of the others, then sets each pool's exact and approximate endpoint gauges.
func (g *gw) syncKV(ctx context.Context) {
	if g.kv == nil {
		return
	}
	addrs := map[string]bool{}
	for _, p := range g.table.Load().Pools() {
		exact := 0
		for _, e := range p.Endpoints {
			if e.KVEvents != "" {
				addrs[e.KVEvents] = true
			}
			if g.kv.Index.Exact(e.KVEvents) {
				exact++
			}
		}
		g.eng.Metrics.KVIndex.WithLabelValues(p.Ref.String(), "exact").Set(float64(exact))
		g.eng.Metrics.KVIndex.WithLabelValues(p.Ref.String(), "approximate").Set(float64(len(p.Endpoints) - exact))
	}
	g.kv.Sync(ctx, addrs)
}

func kvResult(r kvindex.Result) string {
	switch r {
	case kvindex.Gap:
		return "gap"
	case kvindex.Overflow:
		return "overflow"
	}
	return "applied"
}

// allReady is ready when every condition is (the routing table's first snapshot, then each
// extension's handlers).
func allReady(conds []func() bool) func() bool {
	return func() bool {
		for _, c := range conds {
			if !c() {
				return false
			}
		}
		return true
	}
}

// adminMux serves metrics, health, the per-pool autoscaler view and the extensions' admin
// handlers.
func (g *gw) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if g.front.Draining() || !g.ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	pools := g.stats.Handler(g.table, func(ctx context.Context, pool route.PoolRef, pods []string) (map[string]int, bool) {
		return g.pins.Active(ctx, pool, pods)
	})
	mux.Handle("GET /pools/{namespace}/{name}/metrics", pools)
	mux.Handle("GET /pools/{name}/metrics", pools)
	for pattern, h := range g.adminHandlers {
		mux.Handle(pattern, h)
	}
	return mux
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// loadTLS returns a TLS config whose certificate is re-read when the files change (cert-manager
// rotates them in place).
func loadTLS(certFile, keyFile string) (*tls.Config, error) {
	r := &certReloader{cert: certFile, key: keyFile}
	if _, err := r.get(nil); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

type certReloader struct {
	cert, key string
	mu        sync.Mutex
	mod       time.Time
	c         *tls.Certificate
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	st, err := os.Stat(r.cert)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil && st.ModTime().Equal(r.mod) {
		return r.c, nil
	}
	c, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.c != nil {
			klog.Background().Error(err, "Reloading the TLS certificate failed; serving the previous one")
			return r.c, nil
		}
		return nil, fmt.Errorf("TLS key pair: %w", err)
	}
	r.c, r.mod = &c, st.ModTime()
	return r.c, nil
}

// redisClient returns the client of --redis-addr with the shared Redis user,
// password and TLS flags (nil without --redis-addr).
func (o *options) redisClient() (*redis.Client, error) {
	if o.redisAddr == "" {
		return nil, nil
	}
	ro := &redis.Options{Addr: o.redisAddr, DialTimeout: 500 * time.Millisecond, ReadTimeout: o.redisTimeout,
		WriteTimeout: o.redisTimeout, MaxRetries: -1, PoolSize: 64}
	if err := o.redisConn.Apply(ro); err != nil {
		return nil, err
	}
	return redis.NewClient(ro), nil
}

// loadDispatcher reads the dispatcher's token from path.
func loadDispatcher(path string) (*auth.Dispatcher, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < auth.MinDispatcherTokenBytes {
		return nil, fmt.Errorf("%s holds %d bytes, want at least %d", path, len(tok), auth.MinDispatcherTokenBytes)
	}
	return auth.NewDispatcher(tok), nil
}
