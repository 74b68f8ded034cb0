// Command gateway is the NeuroNetes request path: an OpenAI-compatible API (HTTP with SSE,
// WebSocket and gRPC on one port) with authentication, model access, quotas, priority
// admission, session affinity, cache- and load-aware picking and token streaming to the serving
// pods of AgentPools (docs/gateway.md).
//
// It runs in one of two modes:
//
//	gateway                                   watch the cluster: Models, AgentClasses, AgentPools,
//	                                          their pods, Tenants, RoutingPolicies, and the API-key
//	                                          hashes the controller publishes (or API-key Secrets)
//	gateway --backends=http://127.0.0.1:8001  static backends: one pool, no Kubernetes
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/front"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/exectrace"
	"github.com/neuronetes/neuronetes/internal/serving"
)

func main() {
	klog.InitFlags(nil)
	o := options{}
	o.register(flag.CommandLine)
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "gateway: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("gateway"))
	if err := traced(o.debugTraceFile, func() error { return run(ctx, &o) }); err != nil {
		klog.FromContext(ctx).Error(err, "Gateway failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// traced runs f with an execution trace written to path (--debug-trace-file; none when empty),
// ended when f returns. A trace that cannot start fails before f runs.
func traced(path string, f func() error) error {
	stop, err := exectrace.Start(path)
	if err != nil {
		return fmt.Errorf("--debug-trace-file: %w", err)
	}
	return errors.Join(f(), stop())
}

// gw is the assembled gateway.
type gw struct {
	o       *options
	reg     *prometheus.Registry
	table   *route.Table
	eng     *engine.Engine
	front   *front.Server
	scraper *pick.Scraper
	kv      *kvindex.Subscriber // nil without --kv-events-hash
	pins    *affinity.Store
	limiter *quota.Limiter
	stats   *metrics.PoolStats
	ready   func() bool
	// adminHandlers are the extensions' handlers on the admin port.
	adminHandlers map[string]http.Handler
}

func run(ctx context.Context, o *options) error {
	logger := klog.FromContext(ctx)
	g, err := assemble(ctx, o)
	if err != nil {
		return err
	}
	api := g.front.HTTPServer(o.listen, nil)
	if o.tlsCert != "" {
		tc, err := loadTLS(o.tlsCert, o.tlsKey)
		if err != nil {
			return err
		}
		api = g.front.HTTPServer(o.listen, tc)
	}
	admin := serving.Admin().Server(o.adminListen, g.adminMux())
	lAPI, err := front.Listen(o.listen)
	if err != nil {
		return err
	}
	lAdmin, err := front.Listen(o.adminListen)
	if err != nil {
		lAPI.Close()
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- serve(api, lAPI, o.tlsCert != "") }()
	go func() { errc <- admin.Serve(lAdmin) }()
	logger.Info("Gateway serving", "api", lAPI.Addr().String(), "admin", lAdmin.Addr().String(),
		"mode", o.mode(), "tls", o.tlsCert != "")

	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	case <-ctx.Done():
	}
	// Readiness fails first so the Service stops sending new connections; open streams get the
	// rest of the grace period.
	logger.Info("Draining", "delay", o.drainDelay, "timeout", o.shutdownTimeout)
	g.front.Drain()
	time.Sleep(o.drainDelay)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer cancel()
	err = g.front.Shutdown(sctx, api)
	_ = admin.Shutdown(sctx)
	logger.Info("Stopped", "inFlightLeft", g.eng.Picker.Load.Total())
	return err
}

func serve(s *http.Server, l net.Listener, tls bool) error {
	if tls {
		return s.ServeTLS(l, "", "")
	}
	return s.Serve(l)
}
