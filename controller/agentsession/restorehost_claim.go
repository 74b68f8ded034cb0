package agentsession

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// claimRestoreHost resumes session s into a running warm restore host of its class when there
// is one and the session may take it (CanClaimRestoreHost), and reports whether it did. The
// claim moves the host into the session as a fresh session's claim moves a warm pod
// (takeWarmPod: the session's NetworkPolicy and PodDisruptionBudget first, then one update of
// the pod at the version read: the session's label, the warm labels removed, the session its
// only controller), and the host's own ServiceAccount becomes the session's
// (status.serviceAccountName, adopted by the next reconcile, ensureServiceAccount). The Restore
// AgentCheckpoint into it is created in the same step; the node agent of the host's node
// restores at once, since the host container already runs. Hosts on the node that took the
// session's last checkpoint (its local cache holds the dump) come first. A status.lastCheckpoint
// of another namespace is refused before anything is claimed.
func (r *Reconciler) claimRestoreHost(ctx context.Context, s *nnv1.AgentSession) (bool, error) {
	logger := klog.FromContext(ctx)
	if _, err := NewRestore(s, "", s.Status.Pods+1); err != nil {
		return false, err
	}
	var class nnv1.AgentClass
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.ClassRef.Name}, &class); err != nil {
		return false, nil // createResumePod reports it, naming spec.classRef
	}
	if ok, why := CanClaimRestoreHost(s, &class); !ok {
		logger.V(4).Info("No warm restore host claimed", "why", why)
		return false, nil
	}
	pods, byName, err := r.listWarm(ctx, &class, true)
	if err != nil {
		return false, err
	}
	node := r.checkpointNode(ctx, s)
	p, err := r.takeWarmPod(ctx, s, RestoreHostCandidates(pods, RestoreHostHash(&class, r.RestoreHostImage), node), byName)
	if err != nil || p == nil {
		return false, err
	}
	r.hostClaims.record(types.NamespacedName{Namespace: class.Namespace, Name: class.Name}, r.now())
	// The ServiceAccount it ran as until now is retired: retireServiceAccounts deletes it once
	// the host's is adopted and no pod of the session runs as it.
	useServiceAccount(s, p.Spec.ServiceAccountName)
	s.Status.Pods++
	s.Status.PodName = p.Name
	logger.Info("Claimed a warm restore host", "pod", p.Name, "node", p.Spec.NodeName, "checkpointNode", node, "serviceAccount", p.Spec.ServiceAccountName)
	r.event(s, corev1.EventTypeNormal, ClaimHostReason, fmt.Sprintf("resuming into warm restore host %s on %s", p.Name, p.Spec.NodeName))
	rs, err := NewRestore(s, p.Name, s.Status.Pods)
	if err == nil {
		err = r.create(ctx, s, rs)
	}
	if err != nil {
		// Decide's StartRestore creates it on a later reconcile.
		logger.Error(err, "Creating the Restore into the claimed restore host", "pod", p.Name)
	}
	return true, nil
}

// checkpointNode is the node whose node agent took the session's last checkpoint (the status
// of its Checkpoint AgentCheckpoint), where the local cache holds the dump; "" when unknown (a
// pod lost after a resume, whose checkpoint was taken by an earlier pod's suspension).
func (r *Reconciler) checkpointNode(ctx context.Context, s *nnv1.AgentSession) string {
	var ck nnv1.AgentCheckpoint
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: CheckpointName(s.Name, s.Status.Pods)}, &ck); err != nil {
		return ""
	}
	if ck.Status.CheckpointID != s.Status.LastCheckpoint {
		return ""
	}
	return ck.Status.NodeName
}
