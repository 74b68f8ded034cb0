package agentpool

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// Warm-pool restore (contract in agentcheckpoint_types.go): a warm pod whose template carries
// nnv1.RestoreFromAnnotation gets, once Running, an AgentCheckpoint with operation Restore that
// targets it; so does the resume pod that replaces an interrupted pod (interrupt_restore.go). Until that restore has finished (Succeeded, or Failed: the pod then serves as a cold
// start) the pod does not count as a ready warm pod.

// restoreName is the AgentCheckpoint that restores into a pod.
func restoreName(pod string) string { return pod + "-restore" }

// restoreState reports whether a pod awaits a restore: needs is true when the pod asks for one,
// done when its AgentCheckpoint has finished. A restore-from that nnv1.ParseRestoreFrom refuses
// (another namespace's checkpoint, a malformed value) asks for nothing: the pod cold-starts.
func (r *Reconciler) restoreState(ctx context.Context, p *corev1.Pod) (needs, done bool, err error) {
	from := p.Annotations[nnv1.RestoreFromAnnotation]
	if !r.Checkpoints || from == "" || (podState(p) != warmpool.Warm && !isInterruptRestore(p)) {
		return false, true, nil
	}
	if _, _, err := nnv1.ParseRestoreFrom(p.Namespace, from); err != nil {
		klog.FromContext(ctx).Error(err, "Not restoring warm pod", "pod", klog.KObj(p))
		return false, true, nil
	}
	var ck nnv1.AgentCheckpoint
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: restoreName(p.Name)}, &ck); {
	case apierrors.IsNotFound(err):
		return true, false, nil
	case err != nil:
		return true, false, fmt.Errorf("get agentcheckpoint %s: %w", restoreName(p.Name), err)
	}
	ph := ck.Status.Phase
	return true, ph == nnv1.AgentCheckpointSucceeded || ph == nnv1.AgentCheckpointFailed, nil
}

// ensureRestore creates the Restore AgentCheckpoint of a Running warm pod. The pod owns it, so it
// goes away with the pod.
func (r *Reconciler) ensureRestore(ctx context.Context, pool *nnv1.AgentPool, p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return nil
	}
	agent, id, err := nnv1.ParseRestoreFrom(p.Namespace, p.Annotations[nnv1.RestoreFromAnnotation])
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.Name, err)
	}
	ck := &nnv1.AgentCheckpoint{
		ObjectMeta: metav1.ObjectMeta{
			Name: restoreName(p.Name), Namespace: p.Namespace,
			Labels: map[string]string{nnv1.PoolLabel: pool.Name, nnv1.CheckpointAgentLabel: agent},
		},
		Spec: nnv1.AgentCheckpointSpec{
			Operation: nnv1.RestoreOperation, Agent: agent, CheckpointID: id,
			Target: &nnv1.ContainerRef{Pod: p.Name},
		},
	}
	if err := controllerutil.SetOwnerReference(p, ck, r.Scheme); err != nil {
		return fmt.Errorf("owner reference: %w", err)
	}
	if err := r.Client.Create(ctx, ck); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create agentcheckpoint %s: %w", ck.Name, err)
	}
	return nil
}

// ensureRestores creates missing restores and returns, per pod name, whether the pod is ready
// for the warm pool (Ready and, if it asked for a restore, restored).
func (r *Reconciler) ensureRestores(ctx context.Context, pool *nnv1.AgentPool, pods map[string]*corev1.Pod) (map[string]bool, error) {
	ready := map[string]bool{}
	for name, p := range pods {
		needs, done, err := r.restoreState(ctx, p)
		if err != nil {
			return nil, err
		}
		if needs && !done {
			if err := r.ensureRestore(ctx, pool, p); err != nil {
				return nil, err
			}
		}
		ready[name] = podReady(p) && done
	}
	return ready, nil
}

// checkpointPools maps an AgentCheckpoint to its pool.
func checkpointPools(_ context.Context, obj client.Object) []types.NamespacedName {
	if pool := obj.GetLabels()[nnv1.PoolLabel]; pool != "" {
		return []types.NamespacedName{{Namespace: obj.GetNamespace(), Name: pool}}
	}
	return nil
}
