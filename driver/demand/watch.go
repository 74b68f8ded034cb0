package demand

import (
	"context"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Watcher keeps the demand of one node current: it watches DeviceClasses, ResourceClaims,
// ResourceClaimTemplates and (when served) AgentPools and AgentClasses, recomputes the demand after
// every change (at most once per Debounce) and calls OnChange when the profiles differ from the
// last ones.
type Watcher struct {
	Kube kubernetes.Interface
	// Dynamic reads AgentPools and AgentClasses; nil leaves them out.
	Dynamic      dynamic.Interface
	Driver, Node string
	// Layout returns the devices the node publishes with every MIG profile.
	Layout func() []resourceapi.Device
	// OnChange receives the new profiles (sorted).
	OnChange func(profiles []string)
	// Debounce is the pause after a change before recomputing (default 1s).
	Debounce time.Duration
	// SyncTimeout bounds the wait for the informers' first list (default 2m).
	SyncTimeout time.Duration

	objects func() Objects
	last    []string
}

// Start starts the informers, waits for their caches and returns the current demand; a goroutine
// then keeps it current until ctx ends. It fails when the caches do not sync in time (typically
// missing RBAC: list/watch of deviceclasses, resourceclaims, resourceclaimtemplates, agentpools,
// agentclasses).
func (w *Watcher) Start(ctx context.Context) ([]string, error) {
	changed := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal(changed) },
		UpdateFunc: func(any, any) { signal(changed) },
		DeleteFunc: func(any) { signal(changed) },
	}
	f := informers.NewSharedInformerFactory(w.Kube, 0)
	classes := f.Resource().V1().DeviceClasses().Informer()
	claims := f.Resource().V1().ResourceClaims().Informer()
	tmpls := f.Resource().V1().ResourceClaimTemplates().Informer()
	for _, inf := range []cache.SharedIndexInformer{classes, claims, tmpls} {
		_, _ = inf.AddEventHandler(notify)
	}
	f.Start(ctx.Done())
	var pools, aclasses cache.SharedIndexInformer
	if w.Dynamic != nil && w.crdsServed() {
		df := dynamicinformer.NewDynamicSharedInformerFactory(w.Dynamic, 0)
		pools, aclasses = df.ForResource(AgentPools).Informer(), df.ForResource(AgentClasses).Informer()
		_, _ = pools.AddEventHandler(notify)
		_, _ = aclasses.AddEventHandler(notify)
		df.Start(ctx.Done())
	}
	timeout := w.SyncTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	synced := []cache.InformerSynced{classes.HasSynced, claims.HasSynced, tmpls.HasSynced}
	if pools != nil {
		synced = append(synced, pools.HasSynced, aclasses.HasSynced)
	}
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		return nil, fmt.Errorf("demand: the API objects did not sync within %s (RBAC: list and watch deviceclasses, resourceclaims, resourceclaimtemplates, agentpools, agentclasses)", timeout)
	}
	w.objects = func() Objects {
		var o Objects
		for _, x := range classes.GetStore().List() {
			o.Classes = append(o.Classes, x.(*resourceapi.DeviceClass))
		}
		for _, x := range claims.GetStore().List() {
			o.Claims = append(o.Claims, x.(*resourceapi.ResourceClaim))
		}
		for _, x := range tmpls.GetStore().List() {
			o.Templates = append(o.Templates, x.(*resourceapi.ResourceClaimTemplate))
		}
		if pools != nil {
			for _, x := range pools.GetStore().List() {
				o.Pools = append(o.Pools, x.(*unstructured.Unstructured))
			}
			for _, x := range aclasses.GetStore().List() {
				o.AgentClasses = append(o.AgentClasses, x.(*unstructured.Unstructured))
			}
		}
		return o
	}
	w.last = w.compute(ctx)
	go w.run(ctx, changed)
	return w.last, nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// crdsServed reports whether the API serves AgentPools.
func (w *Watcher) crdsServed() bool {
	_, err := w.Kube.Discovery().ServerResourcesForGroupVersion(AgentPools.GroupVersion().String())
	return err == nil
}

func (w *Watcher) compute(ctx context.Context) []string {
	profiles, errs := Compute(ctx, w.Driver, w.Node, w.Layout(), w.objects())
	for _, err := range errs {
		klog.FromContext(ctx).V(2).Info("A request's selector cannot be evaluated on a MIG device", "err", err)
	}
	return profiles
}

func (w *Watcher) run(ctx context.Context, changed <-chan struct{}) {
	debounce := w.Debounce
	if debounce <= 0 {
		debounce = time.Second
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(debounce):
		}
		p := w.compute(ctx)
		if slices.Equal(p, w.last) {
			continue
		}
		klog.FromContext(ctx).Info("MIG profiles in demand changed", "from", w.last, "to", p)
		w.last = p
		w.OnChange(p)
	}
}
