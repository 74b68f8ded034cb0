package rollout

import (
	"context"
	"fmt"
	"net/http"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Watch keeps table current from the AgentRollouts in c (the gateway's informer cache). A
// rollout whose match rules cannot be built is logged and routes everything to stable. synced
// reports whether the handler has applied every rollout of the cache's first list.
func Watch(ctx context.Context, c crcache.Cache, table *Table, client *http.Client) (synced func() bool, err error) {
	inf, err := c.GetInformer(ctx, &nnv1.AgentRollout{})
	if err != nil {
		return nil, fmt.Errorf("watch AgentRollouts: %w", err)
	}
	log := klog.FromContext(ctx)
	upsert := func(obj any) {
		r, ok := obj.(*nnv1.AgentRollout)
		if !ok {
			return
		}
		m, err := NewMatcher(r.Namespace, r.Spec.Match, client)
		v := ViewOf(r, m)
		if err != nil {
			log.Error(err, "AgentRollout match rules are invalid; its traffic stays on the stable pool", "rollout", r.Namespace+"/"+r.Name)
			v.Phase = nnv1.RolloutRolledBack
		}
		table.Upsert(v)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if r, ok := obj.(*nnv1.AgentRollout); ok {
				table.Delete(r.Namespace, r.Name)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch AgentRollouts: %w", err)
	}
	return reg.HasSynced, nil
}
