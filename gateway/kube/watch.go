package kube

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/apikeyhash"
)

// Scheme knows the core and NeuroNetes types.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("core scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("neuronetes scheme: %w", err)
	}
	return s, nil
}

// NewCache returns an informer cache over namespaces (all when empty) that holds only pool pods
// (label neuronetes.io/pool) and either the API-key hashes controller/apikeys publishes in
// hashNamespace (ConfigMaps labelled apikeyhash.Label there; no Secret is read) or, with
// hashNamespace empty, the API-key Secrets themselves (label neuronetes.io/api-keys).
func NewCache(cfg *rest.Config, s *runtime.Scheme, namespaces []string, hashNamespace string) (cache.Cache, error) {
	has := func(key string) labels.Selector {
		r, err := labels.NewRequirement(key, selection.Exists, nil)
		if err != nil {
			panic(err) // constant keys
		}
		return labels.NewSelector().Add(*r)
	}
	o := cache.Options{Scheme: s, DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: has(v1alpha1.PoolLabel)},
		}}
	if hashNamespace != "" {
		o.ByObject[&corev1.ConfigMap{}] = cache.ByObject{Label: has(apikeyhash.Label),
			Namespaces: map[string]cache.Config{hashNamespace: {}}}
	} else {
		o.ByObject[&corev1.Secret{}] = cache.ByObject{Label: has(v1alpha1.APIKeysSecretLabel)}
	}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(cfg, o)
	if err != nil {
		return nil, fmt.Errorf("informer cache: %w", err)
	}
	return c, nil
}

// Watcher rebuilds the routing table and the tenant directory whenever a watched object
// changes. Rebuilds are coalesced: events that arrive during a rebuild cause one more.
type Watcher struct {
	// Cache is the informer cache (NewCache).
	Cache cache.Cache
	// Table and Dir receive the rebuilt snapshots.
	Table *route.Table
	Dir   *access.Holder
	// Default is the policy of pools without a RoutingPolicy.
	Default route.Policy
	// OnChange runs after each rebuild (optional).
	OnChange func()
	// HashNamespace is where controller/apikeys publishes the API-key hashes (the cache's
	// hashNamespace); empty: the API-key Secrets are read directly.
	HashNamespace string
	// Status writes the Tenants' APIKeysReady condition after rebuilds (optional), on its own
	// goroutine and at most every StatusInterval, so the apiserver calls never delay routing.
	Status *TenantStatus

	kick    chan struct{}
	synced  atomic.Bool
	lastErr string

	statusKick chan struct{}
	statusMu   sync.Mutex
	statusJob  *statusJob // the latest rebuild's tenants and problems, not yet synced
}

// StatusInterval is the least time between two Tenant status syncs.
const StatusInterval = 2 * time.Second

type statusJob struct {
	tenants  []v1alpha1.Tenant
	problems []error
}

// watched are the kinds a change of which rebuilds the snapshots.
func (w *Watcher) watched() []client.Object {
	keys := client.Object(&corev1.Secret{})
	if w.HashNamespace != "" {
		keys = &corev1.ConfigMap{}
	}
	return []client.Object{&v1alpha1.AgentClass{}, &v1alpha1.AgentPool{}, &corev1.Pod{},
		&v1alpha1.RoutingPolicy{}, &v1alpha1.Tenant{}, keys}
}

// Register adds the event handlers; call before the cache starts.
func (w *Watcher) Register(ctx context.Context) error {
	w.kick = make(chan struct{}, 1)
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.poke() },
		UpdateFunc: func(any, any) { w.poke() },
		DeleteFunc: func(any) { w.poke() },
	}
	for _, o := range w.watched() {
		inf, err := w.Cache.GetInformer(ctx, o)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", o, err)
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("event handler for %T: %w", o, err)
		}
	}
	return nil
}

func (w *Watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Synced reports whether the first snapshots were built from synced caches.
func (w *Watcher) Synced() bool { return w.synced.Load() }

// Run waits for the caches, then rebuilds on every change until ctx ends. The cache must be
// started by the caller.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.Cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("informer caches did not sync")
	}
	if w.Status != nil {
		w.statusKick = make(chan struct{}, 1)
		go w.statusLoop(ctx)
	}
	w.rebuild(ctx)
	w.synced.Store(true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
			w.rebuild(ctx)
		}
	}
}

// rebuild lists everything from the cache and swaps the snapshots.
func (w *Watcher) rebuild(ctx context.Context) {
	logger := klog.FromContext(ctx)
	var o Objects
	var classes v1alpha1.AgentClassList
	var pools v1alpha1.AgentPoolList
	var pods corev1.PodList
	var pols v1alpha1.RoutingPolicyList
	var tenants v1alpha1.TenantList
	for _, l := range []client.ObjectList{&classes, &pools, &pods, &pols, &tenants} {
		if err := w.Cache.List(ctx, l); err != nil {
			logger.Error(err, "Listing from the informer cache failed; keeping the previous routing table")
			return
		}
	}
	ks, kerrs, err := w.keySets(ctx)
	if err != nil {
		logger.Error(err, "Listing from the informer cache failed; keeping the previous routing table")
		return
	}
	o.Classes, o.Pools, o.Pods, o.Policies = classes.Items, pools.Items, pods.Items, pols.Items
	snap, errs := BuildTable(o, w.Default)
	dir, derrs := BuildDirectory(tenants.Items, ks, w.HashNamespace != "")
	errs = append(errs, kerrs...)
	w.Table.Store(snap)
	w.Dir.Store(dir)
	w.report(logger, append(errs, derrs...))
	w.queueStatus(tenants.Items, derrs)
	logger.V(3).Info("Routing table rebuilt", "pools", len(snap.Pools()), "tenants", len(dir.Tenants), "apiKeys", dir.Keys())
	if w.OnChange != nil {
		w.OnChange()
	}
}

// keySets lists the API-key Secrets, or the published hashes, from the cache.
func (w *Watcher) keySets(ctx context.Context) (KeySets, []error, error) {
	if w.HashNamespace == "" {
		var secrets corev1.SecretList
		if err := w.Cache.List(ctx, &secrets); err != nil {
			return nil, nil, err
		}
		return SecretKeySets(secrets.Items), nil, nil
	}
	var cms corev1.ConfigMapList
	if err := w.Cache.List(ctx, &cms, client.InNamespace(w.HashNamespace)); err != nil {
		return nil, nil, err
	}
	ks, errs := PublishedKeySets(cms.Items, w.HashNamespace)
	return ks, errs, nil
}

// queueStatus hands the tenants and their problems to the status loop (latest wins).
func (w *Watcher) queueStatus(tenants []v1alpha1.Tenant, problems []error) {
	if w.statusKick == nil {
		return
	}
	w.statusMu.Lock()
	w.statusJob = &statusJob{tenants: tenants, problems: problems}
	w.statusMu.Unlock()
	select {
	case w.statusKick <- struct{}{}:
	default:
	}
}

// statusLoop syncs the latest queued job until ctx ends.
func (w *Watcher) statusLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.statusKick:
		}
		w.statusMu.Lock()
		job := w.statusJob
		w.statusJob = nil
		w.statusMu.Unlock()
		if job != nil {
			w.Status.Sync(ctx, job.tenants, job.problems)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(StatusInterval):
		}
	}
}

// report logs configuration problems when they change.
func (w *Watcher) report(logger klog.Logger, errs []error) {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	if s := b.String(); s != w.lastErr {
		w.lastErr = s
		for _, e := range errs {
			logger.Error(e, "Gateway configuration problem")
		}
	}
}
