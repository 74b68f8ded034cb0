package engine

import (
	"context"

	"k8s.io/klog/v2"
)

// costFallback moves the request to its pool's cost fallback (route.Pool.Fallback, from the
// AgentPool's status.cost.fallback): every request with AllSessions, else only a conversation
// not pinned to the pool yet (a new one, or one without a session key). The session key is kept,
// so the fallback's agents read the same session memory. A fallback pool that is missing, empty
// of ready endpoints or itself falling back is not used: the primary serves rather than lose the
// request.
func (r *request) costFallback(ctx context.Context) {
	fb := r.pool.Fallback
	if fb == nil {
		return
	}
	to, ok := r.e.Table.Load().Pool(fb.Pool)
	if !ok || len(to.Endpoints) == 0 || to.Fallback != nil {
		klog.FromContext(ctx).V(2).Info("Cost fallback not usable; the pool serves", "pool", r.pool.Ref.String(), "fallback", fb.Pool.String())
		return
	}
	if !fb.AllSessions && r.keyHash != "" && r.e.Pins.Lookup(ctx, r.pool.Ref, r.keyHash, r.pool.Policy.PinTTL) != "" {
		return // an existing conversation stays on its pod until the budget is exceeded
	}
	r.e.Metrics.Fallbacks.WithLabelValues(r.pool.Ref.String(), fb.Pool.String(), fb.Reason).Inc()
	r.pool = to
	r.sreq.Pool = to.Ref
	r.meta.Pool = to.Ref.String()
}
