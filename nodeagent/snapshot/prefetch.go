package snapshot

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// Prefetcher is implemented by engines that can fetch a restore's checkpoint while the target
// container still starts (a resume pod's sandbox and host container), so that the restore does
// not pay the fetch after it.
type Prefetcher interface {
	// Prefetch starts fetching k/id for a later Restore into c's pod; it returns at once.
	Prefetch(ctx context.Context, c Container, k store.Key, id string)
}

// Prefetch implements Prefetcher: container.Engine.Prefetch, only for a key of c's namespace.
func (e *ContainerdEngine) Prefetch(ctx context.Context, c Container, k store.Key, id string) {
	if k.Namespace != c.Namespace {
		return
	}
	_ = e.C.Prefetch(ctx, k, id, nil)
}

// maybePrefetch starts the fetch of a Restore whose target pod is on this node but whose
// container does not run yet, once per AgentCheckpoint; it runs only after the request passed
// the namespace checks (Reconcile), and names the checkpoint id of the request (a Restore of
// "latest" is fetched when it runs).
func (r *Reconciler) maybePrefetch(ctx context.Context, ac *v1alpha1.AgentCheckpoint, c Container, agent store.Key) {
	p, ok := r.Engine.(Prefetcher)
	if !ok || ac.Spec.Operation != v1alpha1.RestoreOperation || ac.Spec.CheckpointID == "" || agent.Namespace != c.Namespace {
		return
	}
	r.mu.Lock()
	if r.prefetched == nil {
		r.prefetched = map[types.UID]bool{}
	}
	done := r.prefetched[ac.UID]
	r.prefetched[ac.UID] = true
	r.mu.Unlock()
	if done {
		return
	}
	klog.FromContext(ctx).V(2).Info("Prefetching the checkpoint while the target container starts", "pod", c.Pod, "checkpoint", ac.Spec.CheckpointID)
	p.Prefetch(ctx, c, agent, ac.Spec.CheckpointID)
}

// checkpointsOfPod maps a pod of this node to the unfinished AgentCheckpoints that name it, so
// a Restore waiting for its target container runs as soon as the container does (and its
// prefetch starts as soon as the pod is bound here) rather than on the next requeue.
func (r *Reconciler) checkpointsOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != r.NodeName {
		return nil
	}
	var list v1alpha1.AgentCheckpointList
	if err := r.Client.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		klog.FromContext(ctx).V(2).Info("Listing AgentCheckpoints for a pod", "pod", pod.Name, "err", err)
		return nil
	}
	var reqs []reconcile.Request
	for _, ac := range list.Items {
		switch ac.Status.Phase {
		case v1alpha1.AgentCheckpointSucceeded, v1alpha1.AgentCheckpointFailed:
			continue
		}
		if ref, err := containerRef(&ac); err == nil && ref.Pod == pod.Name {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ac)})
		}
	}
	return reqs
}

var _ Prefetcher = (*ContainerdEngine)(nil)

// containerEngine is checked to provide what ContainerdEngine.Prefetch calls.
var _ interface {
	Prefetch(context.Context, store.Key, string, store.ProgressFunc) bool
} = (*container.Engine)(nil)
