package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/neuronetes/neuronetes/controller/scaleapi"
	"github.com/neuronetes/neuronetes/controller/scaleloop"
)

// DefaultScaleWebhookAddr is where POST /v1/scale is served by default (loopback only).
const DefaultScaleWebhookAddr = "127.0.0.1:9404"

// ScaleWebhookPath is the path of the scale-override webhook.
const ScaleWebhookPath = "/v1/scale"

// autoscalerOptions are the flags of the autoscaling loop and its scale webhook.
type autoscalerOptions struct {
	enabled    bool
	natsURL    string
	promURL    string
	addr       string
	tokenFile  string
	syncPeriod time.Duration
}

func (a *autoscalerOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&a.enabled, "autoscaler", true, "run the autoscaling loop (spec.autoscaling of AgentPools) and its scale webhook")
	fs.StringVar(&a.natsURL, "nats-url", "", "NATS server of ToolBindings that name no queueConfig.url (queue-lag scaling)")
	fs.StringVar(&a.promURL, "prometheus-url", "", "Prometheus HTTP API address for spec.autoscaling.externalMetrics queries (empty: those metrics are missing)")
	fs.StringVar(&a.addr, "scale-webhook-addr", DefaultScaleWebhookAddr, "address of the POST "+ScaleWebhookPath+" override webhook (empty disables)")
	fs.StringVar(&a.tokenFile, "scale-webhook-token-file", "", "file holding the bearer token of the scale webhook (required when --scale-webhook-addr is set)")
	fs.DurationVar(&a.syncPeriod, "autoscaler-sync-period", scaleloop.DefaultSyncPeriod, "how often each autoscaled AgentPool is evaluated")
}

// validate checks the flag combination and returns the scale webhook token
// (empty when the webhook is off). It runs before the manager starts, so a bad
// flag fails the process at once.
func (a *autoscalerOptions) validate() (string, error) {
	if !a.enabled {
		return "", nil
	}
	if a.syncPeriod <= 0 {
		return "", fmt.Errorf("--autoscaler-sync-period: must be > 0, got %s", a.syncPeriod)
	}
	if a.addr == "" {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(a.addr); err != nil {
		return "", fmt.Errorf("--scale-webhook-addr %q: %w", a.addr, err)
	}
	if a.tokenFile == "" {
		return "", fmt.Errorf("--scale-webhook-token-file is required when --scale-webhook-addr is set (%q); pass --scale-webhook-addr= to disable the scale webhook", a.addr)
	}
	tok, err := scaleapi.TokenFromFile(a.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--scale-webhook-token-file: %w", err)
	}
	return tok, nil
}

// setupAutoscaler registers the autoscaling loop and, when addr is set, the
// scale webhook. Both run only on the leader: overrides live in the leader's
// memory, so a non-leader must not accept them.
func setupAutoscaler(mgr ctrl.Manager, a *autoscalerOptions, token, namespace string) error {
	var prom *scaleloop.PromSource
	if a.promURL != "" {
		var err error
		if prom, err = scaleloop.NewPromSource(a.promURL); err != nil {
			return fmt.Errorf("--prometheus-url: %w", err)
		}
	}
	overrides := &scaleapi.Overrides{}
	l := scaleloop.NewLoop(a.natsURL, prom, scaleloop.NewMetrics(crmetrics.Registry), overrides)
	l.SyncPeriod = a.syncPeriod
	if err := l.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("autoscaling controller: %w", err)
	}
	// Close the NATS connections the loop opened once the manager stops.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		l.Lag.Close()
		return nil
	})); err != nil {
		return fmt.Errorf("autoscaling lag source: %w", err)
	}
	if a.addr == "" {
		return nil
	}
	h := &scaleapi.Handler{Token: token, DefaultNamespace: namespace, Store: overrides}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return serveScaleWebhook(ctx, a.addr, h)
	})); err != nil {
		return fmt.Errorf("scale webhook: %w", err)
	}
	return nil
}

// serveScaleWebhook serves h at ScaleWebhookPath on addr until ctx ends.
func serveScaleWebhook(ctx context.Context, addr string, h http.Handler) error {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle(ScaleWebhookPath, h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--scale-webhook-addr %q: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("serving the scale webhook", "addr", ln.Addr().String(), "path", ScaleWebhookPath)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("scale webhook: %w", err)
	}
	<-done
	return nil
}
