package agentpool

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// sessionCounts are a pool's conversation sessions as its status reports them.
type sessionCounts struct {
	// pods: sessions that hold a pod (any phase but Suspended, with status.podName);
	// running: sessions Running (their pod Ready); awake: sessions not Suspended.
	pods, running, awake int32
}

// countSessions counts the sessions of pool among ss: those controlled by it (its UID).
func countSessions(pool *nnv1.AgentPool, ss []nnv1.AgentSession) sessionCounts {
	var c sessionCounts
	for i := range ss {
		s := &ss[i]
		if !metav1.IsControlledBy(s, pool) || !s.DeletionTimestamp.IsZero() {
			continue
		}
		if s.Status.Phase == nnv1.SessionSuspended {
			continue
		}
		c.awake++
		if s.Status.PodName != "" {
			c.pods++
		}
		if s.Status.Phase == nnv1.SessionRunning {
			c.running++
		}
	}
	return c
}

// sessionStatus writes the status of a pool through sessions: replicas are its sessions' pods,
// readyReplicas its Running sessions, desiredReplicas its sessions that are not Suspended; no
// warm pods. A pool whose sessions are all suspended reports 0.
func (r *Reconciler) sessionStatus(pool *nnv1.AgentPool, c sessionCounts) {
	st := &pool.Status
	st.ObservedGeneration = pool.Generation
	st.Selector = selectorString(pool.Name)
	st.Replicas, st.ReadyReplicas, st.DesiredReplicas = c.pods, c.running, c.awake
	st.WarmReplicas, st.WarmTarget = 0, 0
	r.setCondition(pool, nnv1.AgentPoolReady, c.running >= c.awake, "Sessions",
		fmt.Sprintf("%d/%d sessions running, the others suspended (spec.sessions)", c.running, c.awake))
	r.setCondition(pool, nnv1.AgentPoolScaling, c.running != c.awake, "Sessions",
		fmt.Sprintf("%d sessions starting or resuming", c.awake-c.running))
	r.setCondition(pool, nnv1.AgentPoolWarmPoolReady, true, "Sessions", "a pool through sessions keeps no warm pods (the class's spec.sessions.warmPoolSize does)")
	if r.Metrics != nil {
		r.Metrics.Replicas.WithLabelValues(pool.Name, pool.Namespace).Set(float64(st.Replicas))
		r.Metrics.DesiredReplicas.WithLabelValues(pool.Name, pool.Namespace).Set(float64(st.DesiredReplicas))
		r.Metrics.WarmReplicas.WithLabelValues(pool.Name, pool.Namespace).Set(0)
	}
}

// reconcileSessions is the pool through sessions (spec.sessions): the gateway's sessions serve
// its conversations, so the pool keeps none of its own pods (any left from before are deleted
// with the drain grace period) and reports its sessions. Without the session controller
// (Reconciler.Sessions false) nothing serves it: Ready=False, reason SessionsDisabled.
func (r *Reconciler) reconcileSessions(ctx context.Context, orig, pool *nnv1.AgentPool, byName map[string]*corev1.Pod, grace int64) (ctrl.Result, error) {
	for _, p := range byName {
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		klog.FromContext(ctx).Info("Deleting a pod of a pool through sessions", "pod", p.Name)
		if err := r.Client.Delete(ctx, p, client.GracePeriodSeconds(grace)); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("delete pod %s: %w", p.Name, err)
		}
	}
	var c sessionCounts
	var res ctrl.Result
	if r.Sessions {
		var ss nnv1.AgentSessionList
		if err := r.Client.List(ctx, &ss, client.InNamespace(pool.Namespace), client.MatchingLabels{nnv1.PoolSessionLabel: pool.Name}); err != nil {
			return ctrl.Result{}, fmt.Errorf("list agentsessions: %w", err)
		}
		c = countSessions(pool, ss.Items)
		expired, next := expiredSessions(pool, ss.Items, r.now())
		for _, s := range expired {
			klog.FromContext(ctx).Info("Deleting a suspended session past the pool's spec.sessions.retention", "agentSession", s.Name)
			uid := s.UID
			if err := r.Client.Delete(ctx, s, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete agentsession %s past retention: %w", s.Name, err)
			}
		}
		res.RequeueAfter = next
	}
	r.sessionStatus(pool, c)
	if !r.Sessions {
		r.setCondition(pool, nnv1.AgentPoolReady, false, "SessionsDisabled",
			"spec.sessions: the controller runs without --agent-sessions, so no session serves this pool")
	}
	if err := r.Client.Status().Patch(ctx, pool, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("patch agentpool status: %w", err)
	}
	return res, nil
}

// expiredSessions returns the sessions of pool (controlled by it, not being deleted) that have
// been Suspended for spec.sessions.retention since their last activity (sessionIdleSince), and
// how long until the next of the others expires (0: none will). Without retention: none.
func expiredSessions(pool *nnv1.AgentPool, ss []nnv1.AgentSession, now time.Time) ([]*nnv1.AgentSession, time.Duration) {
	if pool.Spec.Sessions == nil || pool.Spec.Sessions.Retention == nil {
		return nil, 0
	}
	keep := pool.Spec.Sessions.Retention.Duration
	var out []*nnv1.AgentSession
	var next time.Duration
	for i := range ss {
		s := &ss[i]
		if !metav1.IsControlledBy(s, pool) || !s.DeletionTimestamp.IsZero() || s.Status.Phase != nnv1.SessionSuspended {
			continue
		}
		left := sessionIdleSince(s).Add(keep).Sub(now)
		if left <= 0 {
			out = append(out, s)
			continue
		}
		if next == 0 || left < next {
			next = left
		}
	}
	return out, next
}

// sessionIdleSince is the later of a Suspended session's suspension (status.transitionTime) and
// its activity (AgentSession.Activity): a request that is waking it counts.
func sessionIdleSince(s *nnv1.AgentSession) time.Time {
	var t time.Time
	if s.Status.TransitionTime != nil {
		t = s.Status.TransitionTime.Time
	}
	if a := s.Activity(); a.After(t) {
		t = a
	}
	return t
}

// poolOfSession enqueues the pool a session's label names.
func poolOfSession(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[nnv1.PoolSessionLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}
