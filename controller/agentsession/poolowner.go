package agentsession

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// PoolMismatchReason is the condition and event reason of a pool's session refused against its
// pool (PoolRefusal).
const PoolMismatchReason = "PoolMismatch"

// poolSession reports whether s claims to serve a pool's conversation: it has the label
// PoolSessionLabel or an AgentPool owner.
func poolSession(s *nnv1.AgentSession) bool {
	if _, ok := s.Labels[nnv1.PoolSessionLabel]; ok {
		return true
	}
	for _, o := range s.OwnerReferences {
		// Any group: a reference that only looks like a pool's is refused, not ignored.
		if o.Kind == nnv1.AgentPoolKind {
			return true
		}
	}
	return false
}

// PoolRefusal is why a pool's session (poolSession) may not have a pod, naming the field, or ""
// when it may: its controlling owner must be the AgentPool its label names (and exists, with
// that UID), the pool must have spec.sessions and the session the pool's class, an idle timeout
// and workspace limit not above the pool's, and no RuntimeClass of its own. pool is nil when the
// pool does not exist. A session that serves no pool is never refused.
func PoolRefusal(s *nnv1.AgentSession, pool *nnv1.AgentPool) string {
	if !poolSession(s) {
		return ""
	}
	name := s.Labels[nnv1.PoolSessionLabel]
	owner, uid, ok := nnv1.PoolOwner(s)
	if !ok || owner != name || name == "" {
		return fmt.Sprintf("metadata.ownerReferences: a pool's session must be controlled by the AgentPool its label %s names", nnv1.PoolSessionLabel)
	}
	if pool == nil || pool.UID != uid {
		return fmt.Sprintf("metadata.ownerReferences: AgentPool %s does not exist (or is not this session's owner)", name)
	}
	ss := pool.Spec.Sessions
	if ss == nil {
		return fmt.Sprintf("spec.sessions: AgentPool %s has no spec.sessions, so it has no sessions", name)
	}
	class := pool.Name
	if pool.Spec.AgentClassRef != nil {
		class = pool.Spec.AgentClassRef.Name
	}
	if s.Spec.ClassRef.Name != class {
		return fmt.Sprintf("spec.classRef: %q is not the class of AgentPool %s (%q)", s.Spec.ClassRef.Name, name, class)
	}
	if s.Spec.IdleTimeout == nil || s.Spec.IdleTimeout.Duration > ss.IdleTimeout.Duration {
		return fmt.Sprintf("spec.idleTimeout: a session of AgentPool %s must be suspended within the pool's spec.sessions.idleTimeout %s", name, ss.IdleTimeout.Duration)
	}
	limit, poolLimit := DefaultWorkspaceSizeLimit, DefaultWorkspaceSizeLimit
	if s.Spec.WorkspaceSizeLimit != nil {
		limit = *s.Spec.WorkspaceSizeLimit
	}
	if ss.WorkspaceSizeLimit != nil {
		poolLimit = *ss.WorkspaceSizeLimit
	}
	if limit.Cmp(poolLimit) > 0 {
		return fmt.Sprintf("spec.workspaceSizeLimit: %s is over AgentPool %s's spec.sessions.workspaceSizeLimit %s", limit.String(), name, poolLimit.String())
	}
	if s.Spec.RuntimeClassName != nil {
		return fmt.Sprintf("spec.runtimeClassName: a session of AgentPool %s runs the class template's RuntimeClass", name)
	}
	return ""
}

// PoolFullReason is the condition and event reason of a pool's session kept without a pod
// while its pool's sessions holding one are at spec.maxReplicas (PoolFull).
const PoolFullReason = "PoolFull"

// holdsPod reports whether s holds (or is being given) a pod: running, suspending or resuming,
// or pending with a pod created.
func holdsPod(s *nnv1.AgentSession) bool {
	switch s.Status.Phase {
	case nnv1.SessionRunning, nnv1.SessionSuspending, nnv1.SessionResuming:
		return true
	case "", nnv1.SessionPending:
		return s.Status.PodName != ""
	}
	return false
}

// takesSlot reports whether a CreatePod decision d for s gives the session a pod it does not
// hold yet (a first start, or a resume from Suspended), rather than replacing a lost one.
func takesSlot(s *nnv1.AgentSession, d Decision) bool {
	switch s.Status.Phase {
	case "", nnv1.SessionPending:
		return s.Status.PodName == ""
	case nnv1.SessionSuspended:
		return d.Phase == nnv1.SessionResuming
	}
	return false
}

// PoolFull is why a pool's session may not take a pod now, naming spec.maxReplicas, or "" when
// it may: others are the pool's sessions, the bound its spec.maxReplicas (ReplicaBounds). Only
// sessions the pool controls count, and s itself never does.
func PoolFull(s *nnv1.AgentSession, pool *nnv1.AgentPool, others []nnv1.AgentSession) string {
	_, limit := pool.Spec.ReplicaBounds()
	n := 0
	for i := range others {
		o := &others[i]
		if _, uid, ok := nnv1.PoolOwner(o); o.Name == s.Name || !ok || uid != pool.UID || !holdsPod(o) {
			continue
		}
		n++
	}
	if n < int(limit) {
		return ""
	}
	return fmt.Sprintf("spec.maxReplicas: %d sessions of AgentPool %s hold a pod, its spec.maxReplicas; this one starts when one of them is suspended", n, pool.Name)
}

// poolRefusal reads the pool of a pool's session and returns PoolRefusal, with its reason; for
// a decision that takes the pool a pod (takesSlot) it then returns PoolFull, counting the pool's
// sessions as the API server has them. The count is exact across gateway replicas because this
// controller reconciles one session at a time (controller-runtime's default) and records a
// created pod in the session's status before the next reconcile.
func (r *Reconciler) poolRefusal(ctx context.Context, s *nnv1.AgentSession, d Decision) (string, string, error) {
	if !poolSession(s) {
		return "", "", nil
	}
	var pool *nnv1.AgentPool
	if name := s.Labels[nnv1.PoolSessionLabel]; name != "" {
		p := &nnv1.AgentPool{}
		switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, p); {
		case err == nil:
			pool = p
		case !apierrors.IsNotFound(err):
			return "", "", fmt.Errorf("get agentpool %s: %w", name, err)
		}
	}
	if msg := PoolRefusal(s, pool); msg != "" || !takesSlot(s, d) {
		return msg, PoolMismatchReason, nil
	}
	rd := r.APIReader
	if rd == nil {
		rd = r.Client
	}
	var list nnv1.AgentSessionList
	if err := rd.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{nnv1.PoolSessionLabel: pool.Name}); err != nil {
		return "", "", fmt.Errorf("list the sessions of agentpool %s: %w", pool.Name, err)
	}
	return PoolFull(s, pool, list.Items), PoolFullReason, nil
}
