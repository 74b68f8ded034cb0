package sessionroute

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// PoolOwner is the AgentPool (spec.sessions) whose conversation a session serves, and what its
// sessions get.
type PoolOwner struct {
	// Pool and UID name the AgentPool, in the session's namespace.
	Pool string
	UID  string
	// Class is the pool's AgentClass.
	Class string
	// IdleTimeout and WorkspaceSizeLimit ("" for the session's default) are the pool's
	// spec.sessions.
	IdleTimeout        time.Duration
	WorkspaceSizeLimit string
	// MaxActive bounds the pool's sessions that hold a pod (PoolActive; the pool's
	// spec.maxReplicas): a new conversation, or the resume of a Suspended one, beyond it gets
	// 429. Zero: unbounded.
	MaxActive int
}

// Creator creates AgentSessions (gateway/kube.SessionCreator).
type Creator interface {
	// CreateSession creates s; one that exists already is not an error.
	CreateSession(ctx context.Context, s *v1alpha1.AgentSession) error
}

// PoolSession is the AgentSession of a pool's conversation, as the gateway creates it: name
// (v1alpha1.PoolSessionName), label PoolSessionLabel naming the pool, the pool as its
// controlling owner (no blockOwnerDeletion), and of the spec only classRef, idleTimeout and
// workspaceSizeLimit, the pool's (the chart's admission policy admits nothing else from the
// gateway; the session controller checks them against the pool).
func PoolSession(namespace, name string, o PoolOwner) (*v1alpha1.AgentSession, error) {
	t := true
	s := &v1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{v1alpha1.PoolSessionLabel: o.Pool},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.AgentPoolKind,
				Name: o.Pool, UID: types.UID(o.UID), Controller: &t}}},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: o.Class},
			IdleTimeout: &metav1.Duration{Duration: o.IdleTimeout}},
	}
	if o.WorkspaceSizeLimit != "" {
		q, err := resource.ParseQuantity(o.WorkspaceSizeLimit)
		if err != nil {
			return nil, err
		}
		s.Spec.WorkspaceSizeLimit = &q
	}
	return s, nil
}

// Conflict is the answer when the conversation's session name holds a session that is not the
// pool's (another owner or label).
func Conflict(name string) *openai.Error {
	e := openai.NewError(http.StatusConflict, "invalid_request_error", "session_conflict", "session",
		"The session `%s` of this conversation is not the pool's.", name)
	e.Reason = "session_conflict"
	return e
}

// AwaitPool is Await for the session of a conversation of a pool through sessions (AgentPool
// spec.sessions): when the lookup does not find session namespace/name the router creates it
// (PoolSession) and holds the request while it starts, reading "not found" as not created yet
// until the hold's timeout; a session of that name that is not the pool's gets 409.
func (r *Router) AwaitPool(ctx context.Context, namespace, name string, o PoolOwner) (route.Endpoint, *openai.Error) {
	if namespace == "" || r.Creator == nil {
		return route.Endpoint{}, NotFound(name)
	}
	v := r.Lookup.Session(namespace, name)
	if v.Found && (v.Pool != o.Pool || v.PoolUID != o.UID) {
		return route.Endpoint{}, Conflict(name)
	}
	release, aerr := r.admitPod(ctx, namespace, name, v, o)
	if aerr != nil {
		return route.Endpoint{}, aerr
	}
	defer release()
	created := !v.Found
	if created {
		s, err := PoolSession(namespace, name, o)
		if err == nil {
			err = r.Creator.CreateSession(ctx, s)
		}
		if err != nil {
			r.Metrics.created("error")
			klog.FromContext(ctx).Error(err, "Creating a pool's conversation session failed", "session", namespace+"/"+name, "agentPool", o.Pool)
			return route.Endpoint{}, openai.NewError(http.StatusInternalServerError, "server_error", "session_create_failed", "session",
				"creating the session of this conversation failed")
		}
		r.Metrics.created("ok")
	}
	return r.await(ctx, namespace, name, v, created)
}

// admitPod refuses, with 429 naming spec.maxReplicas, a request whose session would take a pod
// (a new conversation, or a Suspended session that the request would wake) while the pool's
// sessions holding one are at o.MaxActive. The session is neither created nor woken, so a
// Suspended one keeps its checkpoint. An admitted session counts against the bound until the
// returned release is called (when its request is no longer held), as well as once the cache
// shows it, and one session is counted once: so a burst of new conversations at one replica
// gets no more pods than the bound, though the cache has not shown any of them yet. The cache
// and this replica's admissions are all it counts: replicas racing on the last slot may each
// admit one. A cache that cannot be read counts as the pool full.
func (r *Router) admitPod(ctx context.Context, namespace, name string, v View, o PoolOwner) (func(), *openai.Error) {
	if o.MaxActive <= 0 || (v.Found && v.Phase != v1alpha1.SessionSuspended) {
		return func() {}, nil
	}
	key := namespace + "/" + o.Pool
	r.mu.Lock()
	defer r.mu.Unlock()
	names, err := r.Lookup.PoolActive(namespace, o.Pool)
	counted := map[string]bool{}
	for _, n := range names {
		counted[n] = true
	}
	for n := range r.admitted[key] {
		counted[n] = true
	}
	if err == nil && (counted[name] || len(counted) < o.MaxActive) {
		if r.admitted == nil {
			r.admitted = map[string]map[string]int{}
		}
		if r.admitted[key] == nil {
			r.admitted[key] = map[string]int{}
		}
		r.admitted[key][name]++
		return func() { r.release(key, name) }, nil
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Counting a pool's sessions failed: refusing as full", "agentPool", key)
	}
	if v.Found {
		r.Metrics.wait("pool_full", 0)
	} else {
		r.Metrics.created("full")
	}
	e := openai.NewError(http.StatusTooManyRequests, "rate_limit_exceeded", "pool_sessions_full", "session",
		"pool %s runs %d sessions, its spec.maxReplicas; session %s waits for one of them to suspend: retry later", o.Pool, o.MaxActive, name)
	e.RetryAfter = 5 * time.Second
	return nil, e
}

// release ends one held request's admission of session name of pool key (admitPod).
func (r *Router) release(key, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.admitted[key]
	if m[name]--; m[name] <= 0 {
		delete(m, name)
	}
	if len(m) == 0 {
		delete(r.admitted, key)
	}
}
