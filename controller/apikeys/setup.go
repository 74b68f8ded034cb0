package apikeys

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Loop runs Sync on the leader: at start, whenever a Tenant changes, and every Resync (tenant
// Secrets are read, never watched).
type Loop struct {
	Publisher *Publisher
	// Resync is how often every Secret is read again; 0 means DefaultResync.
	Resync time.Duration
	// Cache holds the Tenants (started by the manager).
	Cache cache.Cache

	kick chan struct{}
}

// NeedLeaderElection makes only the leader publish.
func (l *Loop) NeedLeaderElection() bool { return true }

// Start syncs until ctx ends; a failed sync is logged and retried at the next tick.
func (l *Loop) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("apikeys")
	ctx = klog.NewContext(ctx, logger)
	if !l.Cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("tenant cache did not sync")
	}
	every := l.Resync
	if every <= 0 {
		every = DefaultResync
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := l.Publisher.Sync(ctx); err != nil {
			logger.Error(err, "Publishing API-key hashes failed; retrying", "in", every)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
		case <-t.C:
		}
	}
}

func (l *Loop) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Setup adds the publisher to mgr: a Tenant cache over tenantNamespaces (all when empty), a
// Secret getter on the manager's uncached reader, and ConfigMaps kept in namespace.
func Setup(ctx context.Context, mgr ctrl.Manager, namespace string, tenantNamespaces []string, resync time.Duration) error {
	opts := cache.Options{Scheme: mgr.GetScheme(), DefaultTransform: cache.TransformStripManagedFields()}
	if len(tenantNamespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range tenantNamespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return fmt.Errorf("tenant cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("tenant cache: %w", err)
	}
	reader := mgr.GetAPIReader()
	get := func(ctx context.Context, ns, name string) (*corev1.Secret, error) {
		var s corev1.Secret
		if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			return nil, err
		}
		return &s, nil
	}
	w, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	l := &Loop{Publisher: &Publisher{Tenants: c, Get: get, Client: w, Namespace: namespace}, Resync: resync, Cache: c,
		kick: make(chan struct{}, 1)}
	inf, err := c.GetInformer(ctx, &nnv1.Tenant{})
	if err != nil {
		return fmt.Errorf("tenant informer: %w", err)
	}
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { l.poke() },
		UpdateFunc: func(any, any) { l.poke() },
		DeleteFunc: func(any) { l.poke() },
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		return fmt.Errorf("tenant informer: %w", err)
	}
	if err := mgr.Add(l); err != nil {
		return fmt.Errorf("api-key publisher: %w", err)
	}
	return nil
}
