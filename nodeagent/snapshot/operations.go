package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/checkpoint/workspace"
)

// progressReporter patches status.progress in steps of 10 percent.
func (r *Reconciler) progressReporter(ctx context.Context, ac *v1alpha1.AgentCheckpoint) store.ProgressFunc {
	var mu sync.Mutex
	last := int32(-1)
	return func(p store.Progress) {
		if p.Total == 0 {
			return
		}
		pct := int32(p.Done * 100 / p.Total)
		mu.Lock()
		defer mu.Unlock()
		if pct/10 == last/10 && pct != 100 || pct == last {
			return
		}
		last = pct
		patch := client.MergeFrom(ac.DeepCopy())
		ac.Status.Progress = pct
		if err := r.Client.Status().Patch(ctx, ac, patch); err != nil {
			klog.FromContext(ctx).V(2).Info("Progress update failed", "err", err)
		}
	}
}

func (r *Reconciler) checkpoint(ctx context.Context, ac *v1alpha1.AgentCheckpoint, c Container, agent store.Key) error {
	id := CheckpointID(ac)
	m, err := r.Engine.Checkpoint(ctx, c, agent, id, ac.Spec.LeaveRunning, r.progressReporter(ctx, ac))
	if err != nil {
		reason := "CheckpointFailed"
		if errors.Is(err, workspace.ErrTooLarge) {
			reason = ReasonWorkspaceTooLarge
		}
		return r.fail(ctx, ac, reason, err)
	}
	r.Recorder.Eventf(ac, corev1.EventTypeNormal, "Checkpointed", "stored %s/%s: %d bytes, %d new after dedup", agent, id, m.TotalBytes, m.NewBytes)
	if rt := ac.Spec.Retention; rt != nil {
		pol := store.Retention{KeepLast: int(rt.KeepLast)}
		if rt.MaxAge != nil {
			pol.MaxAge = rt.MaxAge.Duration
		}
		res, err := r.Engine.Prune(ctx, agent, pol)
		if err != nil {
			r.Recorder.Eventf(ac, corev1.EventTypeWarning, "PruneFailed", "retention on %s: %v", agent, err)
		} else if len(res.Deleted) > 0 {
			r.Recorder.Eventf(ac, corev1.EventTypeNormal, "Pruned", "deleted %d old checkpoints of %s, freed %d bytes", len(res.Deleted), agent, res.Bytes)
		}
	}
	return r.succeed(ctx, ac, id, m)
}

func (r *Reconciler) restore(ctx context.Context, ac *v1alpha1.AgentCheckpoint, c Container, agent store.Key) error {
	id := ac.Spec.CheckpointID
	if id == "" {
		m, err := r.Engine.Latest(ctx, agent)
		if err != nil {
			return r.fail(ctx, ac, "NoCheckpoint", fmt.Errorf("latest checkpoint of agent %q: %w", agent, err))
		}
		id = m.ID
	}
	if err := r.Engine.Restore(ctx, c, agent, id, r.progressReporter(ctx, ac)); err != nil {
		return r.fail(ctx, ac, "RestoreFailed", err)
	}
	r.Recorder.Eventf(ac, corev1.EventTypeNormal, "Restored", "restored %s/%s into %s/%s", agent, id, c.Pod, c.Name)
	return r.succeed(ctx, ac, id, nil)
}

func (r *Reconciler) succeed(ctx context.Context, ac *v1alpha1.AgentCheckpoint, id string, m *store.Manifest) error {
	now := metav1.Now()
	ac.Status.Phase, ac.Status.CheckpointID, ac.Status.Progress, ac.Status.CompletionTime = v1alpha1.AgentCheckpointSucceeded, id, 100, &now
	if m != nil {
		ac.Status.TotalBytes, ac.Status.NewBytes = m.TotalBytes, m.NewBytes
	}
	ac.Status.Message = fmt.Sprintf("%s done in %v", ac.Spec.Operation, now.Sub(ac.Status.StartTime.Time).Round(time.Millisecond))
	return r.updateStatus(ctx, ac)
}

// fail records a final failure; the returned error is nil once recorded,
// so the request is not retried (a new AgentCheckpoint is the retry).
func (r *Reconciler) fail(ctx context.Context, ac *v1alpha1.AgentCheckpoint, reason string, cause error) error {
	klog.FromContext(ctx).Error(cause, "AgentCheckpoint failed", "reason", reason)
	now := metav1.Now()
	ac.Status.Phase, ac.Status.Message, ac.Status.CompletionTime = v1alpha1.AgentCheckpointFailed, reason+": "+cause.Error(), &now
	r.Recorder.Eventf(ac, corev1.EventTypeWarning, reason, "%v", cause)
	return r.updateStatus(ctx, ac)
}

// updateStatus writes the final status, re-reading on conflicts (progress
// patches bump the resourceVersion).
func (r *Reconciler) updateStatus(ctx context.Context, ac *v1alpha1.AgentCheckpoint) error {
	want := ac.Status
	for try := 0; ; try++ {
		err := r.Client.Status().Update(ctx, ac)
		if err == nil || try == 3 {
			return err
		}
		if gerr := r.Client.Get(ctx, client.ObjectKeyFromObject(ac), ac); gerr != nil {
			return gerr
		}
		ac.Status = want
	}
}
