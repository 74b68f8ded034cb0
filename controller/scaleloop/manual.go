package scaleloop

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scaleapi"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// ManualScaleOverridden is the Event reason of a spec.replicas written outside the autoscaler
// and replaced by its decision.
const ManualScaleOverridden = "ManualScaleOverridden"

// manualScale records what happened to a spec.replicas written outside the autoscaler. The
// autoscaler owns the replicas of an autoscaled pool, as the HPA owns its target's: the written
// value is taken as the current count, re-decided at once, and replaced when the decision differs.
func (l *Loop) manualScale(ctx context.Context, pool *v1alpha1.AgentPool, d scalepolicy.Decision) {
	logger := klog.FromContext(ctx)
	if !d.Changed() {
		logger.Info("Manual scale kept by the autoscaler's decision", "replicas", d.Current, "reason", d.Reason)
		return
	}
	logger.Info("Manual scale overridden", "written", d.Current, "decided", d.Desired, "reason", d.Reason)
	l.Recorder.Eventf(pool, corev1.EventTypeWarning, ManualScaleOverridden,
		"spec.replicas was set to %d outside the autoscaler, which owns the replicas of this pool: it decided %d (%s). "+
			"For a floor set spec.minReplicas; for a temporary count POST /v1/scale", d.Current, d.Desired, d.Reason)
}

// override returns the pool's live /v1/scale override, or nil. A malformed annotation raises a
// Warning Event and is ignored; an expired one is removed from the pool.
func (l *Loop) override(ctx context.Context, pool *v1alpha1.AgentPool, now time.Time) *scalepolicy.Override {
	o, live, err := scaleapi.FromPool(pool, now)
	switch {
	case err != nil:
		l.Recorder.Eventf(pool, corev1.EventTypeWarning, "InvalidScaleOverride", "%v; ignored", err)
		return nil
	case live:
		return o.Policy()
	case o != nil:
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{scaleapi.OverrideAnnotation: nil}}})
		if err := l.Client.Patch(ctx, pool, client.RawPatch(types.MergePatchType, patch)); err != nil {
			klog.FromContext(ctx).V(2).Info("Expired scale override not removed", "err", err)
		}
	}
	return nil
}
