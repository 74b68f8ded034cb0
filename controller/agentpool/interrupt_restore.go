package agentpool

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// Restore from the interrupted pod's own checkpoint (spotStrategy.onInterruption): when no warm
// pod takes over and an interrupted serving pod has a Succeeded AgentCheckpoint of its own
// (operation Checkpoint, source.pod = the pod), its replacement is a resume pod: the first
// container runs Reconciler.RestoreHostImage (a pause image) without the template's command,
// arguments, liveness and startup probes, and the node agent restores that checkpoint into it
// through the Restore AgentCheckpoint the reconciler creates once it runs (restore.go). Its
// readiness probe stays, so it turns Ready, and the interrupted pod leaves, once the restored
// agent serves. A failed restore deletes the resume pod and marks the interrupted pod, whose next
// replacement starts cold.

// RestoresInterruptedAnnotation on a replacement pod names the interrupted pod whose checkpoint is
// restored into it.
const RestoresInterruptedAnnotation = "neuronetes.io/restores-interrupted"

// RestoreFailedAnnotation on an interrupted pod records that restoring its checkpoint into a
// replacement failed; its next replacement starts cold.
const RestoreFailedAnnotation = "neuronetes.io/interrupt-restore-failed"

// restoreSource is where one interrupted pod's replacement is restored from.
type restoreSource struct {
	victim, agent, id string
}

// restoreFrom is the value of nnv1.RestoreFromAnnotation for s.
func (s restoreSource) restoreFrom() string { return s.agent + "/" + s.id }

// latestCheckpointOf returns pod's latest Succeeded Checkpoint AgentCheckpoint among cks, or nil.
func latestCheckpointOf(cks []nnv1.AgentCheckpoint, pod string) *nnv1.AgentCheckpoint {
	var best *nnv1.AgentCheckpoint
	for i := range cks {
		ck := &cks[i]
		if ck.Spec.Operation != nnv1.CheckpointOperation || ck.Status.Phase != nnv1.AgentCheckpointSucceeded ||
			ck.Spec.Source == nil || ck.Spec.Source.Pod != pod || ck.Status.CheckpointID == "" {
			continue
		}
		if best == nil || completedAfter(ck, best) {
			best = ck
		}
	}
	return best
}

// completedAfter orders checkpoints by completion time, then name.
func completedAfter(a, b *nnv1.AgentCheckpoint) bool {
	switch {
	case a.Status.CompletionTime == nil:
		return false
	case b.Status.CompletionTime == nil:
		return true
	case !a.Status.CompletionTime.Equal(b.Status.CompletionTime):
		return b.Status.CompletionTime.Before(a.Status.CompletionTime)
	}
	return a.Name > b.Name
}

// checkpointAgent is the store key of a checkpoint of pod: spec.agent, else the pod's AgentClass
// label, else its name (the node agent's default).
func checkpointAgent(ck *nnv1.AgentCheckpoint, pod *corev1.Pod) string {
	if ck.Spec.Agent != "" {
		return ck.Spec.Agent
	}
	if c := pod.Labels[nnv1.AgentClassLabel]; c != "" {
		return c
	}
	return pod.Name
}

// interruptRestoreSources returns, in the interrupted pods' order, a restore source for each
// interrupted serving pod that has a checkpoint of its own, no replacement restoring it yet and no
// failed restore. It returns none unless checkpoints are served and RestoreHostImage is set.
func (r *Reconciler) interruptRestoreSources(ctx context.Context, ns string, interrupted []interruptedPod, byName map[string]*corev1.Pod) ([]restoreSource, error) {
	if !r.Checkpoints || r.RestoreHostImage == "" || len(interrupted) == 0 {
		return nil, nil
	}
	restoring := map[string]bool{}
	for _, p := range byName {
		if v := p.Annotations[RestoresInterruptedAnnotation]; v != "" && p.DeletionTimestamp.IsZero() {
			restoring[v] = true
		}
	}
	var cks nnv1.AgentCheckpointList
	if err := r.Client.List(ctx, &cks, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list agentcheckpoints: %w", err)
	}
	var out []restoreSource
	for _, ip := range interrupted {
		p := byName[ip.name]
		if ip.state != warmpool.Serving || p == nil || restoring[ip.name] || p.Annotations[RestoreFailedAnnotation] != "" {
			continue
		}
		if ck := latestCheckpointOf(cks.Items, ip.name); ck != nil {
			out = append(out, restoreSource{victim: ip.name, agent: checkpointAgent(ck, p), id: ck.Status.CheckpointID})
		}
	}
	return out, nil
}

// makeResumePod turns a replacement pod into a resume pod for src.
func makeResumePod(pod *corev1.Pod, src restoreSource, hostImage string) {
	pod.Annotations[nnv1.RestoreFromAnnotation] = src.restoreFrom()
	pod.Annotations[RestoresInterruptedAnnotation] = src.victim
	c := &pod.Spec.Containers[0]
	c.Image, c.Command, c.Args = hostImage, nil, nil
	c.LivenessProbe, c.StartupProbe = nil, nil
}

// isInterruptRestore reports a replacement pod that restores an interrupted pod's checkpoint.
func isInterruptRestore(p *corev1.Pod) bool {
	return p.Annotations[RestoresInterruptedAnnotation] != "" && p.Annotations[nnv1.RestoreFromAnnotation] != "" &&
		podState(p) == warmpool.Serving
}

// restoreFailed decides whether a resume pod's restore counts as failed: its Restore
// AgentCheckpoint failed, or the interrupted pod left (drained at onInterruption.timeout) before
// the restore succeeded (a pod that cannot run would never finish it).
func restoreFailed(phase nnv1.AgentCheckpointPhase, victimLeft bool) bool {
	return phase == nnv1.AgentCheckpointFailed || (victimLeft && phase != nnv1.AgentCheckpointSucceeded)
}

// dropFailedInterruptRestores deletes the resume pods whose restore failed (restoreFailed;
// removing them from byName, so the planner replaces them) and marks their interrupted pods, whose
// next replacement then starts cold.
func (r *Reconciler) dropFailedInterruptRestores(ctx context.Context, byName map[string]*corev1.Pod) error {
	for name, p := range byName {
		// A Ready resume pod serves: its agent was restored (or answers anyway); it stays.
		if !isInterruptRestore(p) || !p.DeletionTimestamp.IsZero() || podReady(p) {
			continue
		}
		var ck nnv1.AgentCheckpoint
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: restoreName(name)}, &ck); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("get agentcheckpoint %s: %w", restoreName(name), err)
		}
		victim := p.Annotations[RestoresInterruptedAnnotation]
		v := byName[victim]
		left := v == nil || !v.DeletionTimestamp.IsZero()
		if !restoreFailed(ck.Status.Phase, left) {
			continue
		}
		if ck.Status.Message == "" {
			ck.Status.Message = "the interrupted pod left (onInterruption.timeout) before the restore finished"
		}
		if !left {
			why := fmt.Sprintf("%s: %s", restoreName(name), ck.Status.Message)
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RestoreFailedAnnotation: why}}})
			if err := r.Client.Patch(ctx, v, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("mark interrupted pod %s: %w", victim, err)
			}
			if v.Annotations == nil {
				v.Annotations = map[string]string{}
			}
			v.Annotations[RestoreFailedAnnotation] = why
		}
		zero := int64(0)
		if err := r.Client.Delete(ctx, p, &client.DeleteOptions{GracePeriodSeconds: &zero}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete resume pod %s: %w", name, err)
		}
		klog.FromContext(ctx).Info("Restore into the replacement of an interrupted pod failed; its next replacement starts cold",
			"pod", name, "interrupted", victim, "message", ck.Status.Message)
		delete(byName, name)
	}
	return nil
}
