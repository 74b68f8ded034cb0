package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"k8s.io/client-go/rest"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/kube"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// startKube watches the cluster and keeps the routing table and the tenant directory current;
// with --auth=required the Tenants authenticate callers and get their APIKeysReady condition.
// Readiness waits for the first snapshot.
// It returns the function that starts the watch, to be called once the extension builders have
// registered their own informers.
func startKube(ctx context.Context, g *gw, pol route.Policy, deps *extensionDeps) (func(), error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	cfg.UserAgent = "neuronetes-gateway"
	s, err := kube.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := kube.NewCache(cfg, s, splitList(g.o.namespaces), g.o.hashNS)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: s, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dir := access.NewHolder(nil)
	w := &kube.Watcher{Cache: c, Table: g.table, Dir: dir, Default: pol, OnChange: g.tableChanged, HashNamespace: g.o.hashNS}
	if err := w.Register(ctx); err != nil {
		return nil, err
	}
	if g.o.auth == "required" {
		a, err := newAuthenticator(dir)
		if err != nil {
			return nil, err
		}
		g.eng.Auth = a
		// Tenants whose key Secrets cannot be used say so in their status (tenants/status
		// patch). With published hashes the controller says why a Secret is unusable; else the
		// Secret's metadata is read directly, since the cache holds only labelled Secrets.
		w.Status = &kube.TenantStatus{Client: cl}
		if g.o.hashNS == "" {
			direct, err := client.New(cfg, client.Options{Scheme: s})
			if err != nil {
				return nil, fmt.Errorf("kubernetes client: %w", err)
			}
			w.Status.Reader = direct
		}
	} else {
		g.eng.Anonymous = access.AnonymousIn(g.o.anonNS)
	}
	g.ready = w.Synced
	startSessions, err := startSessionRoutes(ctx, g, cfg)
	if err != nil {
		return nil, err
	}
	deps.Client, deps.Cache = cl, c
	return func() {
		startSessions()
		go func() {
			if err := c.Start(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Informer cache stopped")
			}
		}()
		go func() {
			if err := w.Run(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Watch stopped")
			}
		}()
	}, nil
}

// startSessionRoutes, with --agent-sessions, gives the engine its session router: AgentSessions
// and session pods from a cache of their own, activity written by merge patch. Readiness then
// also waits for that cache. It returns the function that starts the cache.
func startSessionRoutes(ctx context.Context, g *gw, cfg *rest.Config) (func(), error) {
	if !g.o.agentSessions {
		return func() {}, nil
	}
	s, err := kube.Scheme()
	if err != nil {
		return nil, err
	}
	sc, err := kube.NewSessionCache(cfg, s, splitList(g.o.namespaces))
	if err != nil {
		return nil, err
	}
	direct, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	logger := klog.FromContext(ctx).WithName("sessions")
	// Held requests are woken by the cache's events of their session, not by polling it.
	changes := &sessionroute.Changes{}
	if err := kube.NotifySessionChanges(ctx, sc, changes); err != nil {
		return nil, err
	}
	g.eng.AgentSessions = &sessionroute.Router{
		Changes:  changes,
		Lookup:   &kube.SessionLookup{Reader: sc, Log: logger},
		Activity: &kube.SessionActivity{Client: direct},
		Creator:  &kube.SessionCreator{Client: direct},
		// A held request goes to the new pod once it accepts a connection (a template without a
		// readiness probe is Ready before the agent listens).
		Probe: sessionroute.ProbeDial,
		Cfg: sessionroute.Config{Timeout: g.o.sessionResumeTimeout, MaxHeld: g.o.sessionMaxHeld,
			ActivityInterval: g.o.sessionActivity},
		Metrics: sessionroute.NewMetrics(g.reg),
	}
	var synced atomic.Bool
	routing := g.ready
	g.ready = func() bool { return routing() && synced.Load() }
	return func() {
		go func() {
			if err := sc.Start(ctx); err != nil {
				logger.Error(err, "Session cache stopped")
			}
		}()
		go func() { synced.Store(sc.WaitForCacheSync(ctx)) }()
	}, nil
}
