package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/neuronetes/neuronetes/controller/scaleapi"
	"github.com/neuronetes/neuronetes/controller/scaleloop"
	"github.com/neuronetes/neuronetes/internal/serving"
)

// DefaultScaleWebhookAddr is where POST /v1/scale is served by default (loopback only, TLS).
const DefaultScaleWebhookAddr = "127.0.0.1:9404"

// ScaleWebhookPath is the path of the scale-override webhook.
const ScaleWebhookPath = "/v1/scale"

// autoscalerOptions are the flags of the autoscaling loop and its scale webhook.
type autoscalerOptions struct {
	enabled    bool
	natsURL    string
	promURL    string
	addr       string
	tokensFile string
	certDir    string
	syncPeriod time.Duration
}

func (a *autoscalerOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&a.enabled, "autoscaler", true, "run the autoscaling loop (spec.autoscaling of AgentPools) and its scale webhook")
	fs.StringVar(&a.natsURL, "nats-url", "", "NATS server of ToolBindings that name no queueConfig.url (queue-lag scaling)")
	fs.StringVar(&a.promURL, "prometheus-url", "", "Prometheus HTTP API address for spec.autoscaling.externalMetrics queries (empty: those metrics are missing)")
	fs.StringVar(&a.addr, "scale-webhook-addr", DefaultScaleWebhookAddr, "address of the POST "+ScaleWebhookPath+" override webhook, served over TLS (empty disables)")
	fs.StringVar(&a.tokensFile, "scale-webhook-tokens-file", "", "file of the scale webhook's bearer tokens, one \"<namespaces> <token>\" per line (namespaces comma-separated or *); required when --scale-webhook-addr is set")
	fs.StringVar(&a.certDir, "scale-webhook-cert-dir", "", "directory with the scale webhook's tls.crt and tls.key, reloaded when they change (default: --webhook-cert-dir)")
	fs.DurationVar(&a.syncPeriod, "autoscaler-sync-period", scaleloop.DefaultSyncPeriod, "how often each autoscaled AgentPool is evaluated")
}

// validate checks the flag combination and returns the scale webhook's tokens
// (nil when the webhook is off). It runs before the manager starts, so a bad
// flag fails the process at once.
func (a *autoscalerOptions) validate() (*scaleapi.Tokens, error) {
	if !a.enabled {
		return nil, nil
	}
	if a.syncPeriod <= 0 {
		return nil, fmt.Errorf("--autoscaler-sync-period: must be > 0, got %s", a.syncPeriod)
	}
	if a.addr == "" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(a.addr); err != nil {
		return nil, fmt.Errorf("--scale-webhook-addr %q: %w", a.addr, err)
	}
	if a.tokensFile == "" {
		return nil, fmt.Errorf("--scale-webhook-tokens-file is required when --scale-webhook-addr is set (%q); pass --scale-webhook-addr= to disable the scale webhook", a.addr)
	}
	toks, err := scaleapi.LoadTokens(a.tokensFile)
	if err != nil {
		return nil, fmt.Errorf("--scale-webhook-tokens-file: %w", err)
	}
	return toks, nil
}

// setupAutoscaler registers the autoscaling loop (leader only) and, when addr is set, the scale
// webhook. The webhook runs on every replica: it stores overrides on the AgentPool, where the
// leader's loop sees them through its watch.
func setupAutoscaler(mgr ctrl.Manager, a *autoscalerOptions, tokens *scaleapi.Tokens, namespace string, prices scaleloop.PriceSource) error {
	var prom *scaleloop.PromSource
	if a.promURL != "" {
		var err error
		if prom, err = scaleloop.NewPromSource(a.promURL); err != nil {
			return fmt.Errorf("--prometheus-url: %w", err)
		}
	}
	l := scaleloop.NewLoop(a.natsURL, prom, scaleloop.NewMetrics(crmetrics.Registry))
	l.SyncPeriod = a.syncPeriod
	l.Prices = prices
	if err := gatewayMetrics.apply(l, mgr); err != nil {
		return err
	}
	if err := queueLag.apply(l, mgr, a.natsURL); err != nil {
		return err
	}
	l.State = &scaleloop.ConfigMapStore{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}
	if err := l.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("autoscaling controller: %w", err)
	}
	if err := (&scaleloop.BindingReconciler{}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("toolbinding provider controller: %w", err)
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
	h := &scaleapi.Handler{Tokens: tokens, DefaultNamespace: namespace, Scope: namespace, Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}
	certDir := a.certDir
	if err := mgr.Add(allReplicas(func(ctx context.Context) error {
		return serveTLS(ctx, "scale webhook", "--scale-webhook", a.addr, certDir, ScaleWebhookPath, h)
	})); err != nil {
		return fmt.Errorf("scale webhook: %w", err)
	}
	return nil
}

// allReplicas is a runnable that runs on every replica, leader or not.
type allReplicas func(context.Context) error

func (f allReplicas) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (allReplicas) NeedLeaderElection() bool { return false }

var _ manager.LeaderElectionRunnable = allReplicas(nil)

// serveTLS serves h at path on addr over TLS until ctx ends; what names the server in logs and
// errors, flag the flags' prefix. The key pair is read from certDir (tls.crt, tls.key) and
// reloaded when the files change.
func serveTLS(ctx context.Context, what, flag, addr, certDir, path string, h http.Handler) error {
	logger := klog.FromContext(ctx)
	cw, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("%s TLS (%s-cert-dir %s): %w", what, flag, certDir, err)
	}
	go func() {
		if err := cw.Start(ctx); err != nil {
			logger.Error(err, "certificate watcher stopped", "server", what)
		}
	}()
	mux := http.NewServeMux()
	mux.Handle(path, h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s-addr %q: %w", flag, addr, err)
	}
	srv := serving.Admin().Server("", mux)
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate}
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("serving over TLS", "server", what, "addr", ln.Addr().String(), "path", path)
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", what, err)
	}
	<-done
	return nil
}
