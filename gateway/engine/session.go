package engine

import (
	"context"
	"net/http"
	"strings"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// SessionRouter resolves a request that names an AgentSession to the session's pod, holding it
// while the session starts or resumes (gateway/sessionroute.Router).
type SessionRouter interface {
	Await(ctx context.Context, namespace, name string) (route.Endpoint, *openai.Error)
	// AwaitPool is Await for the session of a pool's conversation (AgentPool spec.sessions),
	// which it creates when there is none.
	AwaitPool(ctx context.Context, namespace, name string, o sessionroute.PoolOwner) (route.Endpoint, *openai.Error)
}

// SessionPoolName is the pool name of session routes in metrics, headers and load accounting:
// '@' is in no Kubernetes name, so it never names an AgentPool.
const SessionPoolName = "@agentsessions"

// runSession is the path of a request naming an AgentSession (Inbound.Session): the session is
// looked up in the caller's own namespace only (another tenant's session and a missing one get
// the same 404), the guardrail stages and the tenant's model access and quota apply as to a
// pool, and the request goes to the session's one pod, after the hold when it is not serving.
func (r *request) runSession(ctx context.Context) *openai.Error {
	e, name := r.e, r.in.Session
	r.session = true
	if e.AgentSessions == nil || r.tenant.Pool != nil || r.tenant.Namespace == "" {
		// No session routes here, the dispatcher's pool-bound credential, or a gateway without
		// namespaces: no session can be addressed.
		return sessionroute.NotFound(name)
	}
	if !r.tenant.Allows(r.body.Model) {
		e.Metrics.Rejected.WithLabelValues("forbidden_model").Inc()
		return ModelNotFound(r.body.Model)
	}
	r.pool = &route.Pool{Ref: route.PoolRef{Namespace: r.tenant.Namespace, Name: SessionPoolName},
		Model: r.body.Model, Policy: route.DefaultPolicy()}
	if aerr := r.stages(ctx, []*route.Pool{r.pool}); aerr != nil {
		return aerr
	}
	if r.filtered {
		return r.answerFiltered()
	}
	// The conversation is the session: the backend's conversation headers carry the session's
	// tenant-scoped key, and no pin is kept (the session has one pod).
	r.sreq.Pool, r.meta.Pool, r.meta.Model = r.pool.Ref, r.pool.Ref.String(), r.body.Model
	r.sreq.SessionKey = e.Sessions.Scope(r.tenant, "agentsession/"+name)
	if err := e.Sessions.ScopeFields(r.tenant, r.body, r.pool.Policy.SessionKeys); err != nil {
		return openai.BadRequest("metadata", "%v", err)
	}
	r.promptTokens = openai.EstimateTokens(r.body.PromptText())
	if aerr := r.priority(); aerr != nil {
		return aerr
	}
	return r.serveSession(ctx, func(ctx context.Context) (route.Endpoint, *openai.Error) {
		return e.AgentSessions.Await(ctx, r.tenant.Namespace, name)
	})
}

// serveSession applies the tenant's quota, waits for the session to serve and dispatches to its
// pod. A held request counts against the tenant's concurrency quota while it waits.
func (r *request) serveSession(ctx context.Context, await func(context.Context) (route.Endpoint, *openai.Error)) *openai.Error {
	e := r.e
	if e.Quota != nil {
		g, qerr := e.Quota.Admit(ctx, r.tenant.Key(), r.pool.Ref.String(), r.tenant.QuotaFor(r.pool.Ref.Name), r.promptTokens+r.body.CompletionBudget())
		if qerr != nil {
			return qerr
		}
		defer func() { g.Settle(ctx, r.billed()) }()
	}
	ep, aerr := await(ctx)
	if aerr != nil {
		return aerr
	}
	r.pool.Endpoints = []route.Endpoint{ep}
	return r.dispatch(ctx)
}

// runPoolSession serves a request to a pool through sessions (route.Pool.Sessions, AgentPool
// spec.sessions), after the pool's selection, stages and priority: the conversation's
// tenant-scoped session key names its AgentSession (v1alpha1.PoolSessionName) in the pool's
// namespace, which is created on the conversation's first request and then awaited like a
// session route's. A request without a session key is refused with 400 naming the key sources.
// No pin is kept: the session has one pod.
func (r *request) runPoolSession(ctx context.Context) *openai.Error {
	e, pool := r.e, r.pool
	if r.keyHash == "" {
		srcs := make([]string, len(pool.Policy.SessionKeys))
		for i, s := range pool.Policy.SessionKeys {
			srcs[i] = s.String()
		}
		e.Metrics.Rejected.WithLabelValues("no_session_key").Inc()
		return openai.NewError(http.StatusBadRequest, "invalid_request_error", "session_key_required", "conversation_id",
			"pool %s serves each conversation by its own session (spec.sessions): the request names no conversation; send one of %s",
			pool.Ref.Name, strings.Join(srcs, ", "))
	}
	if e.AgentSessions == nil {
		return sessionroute.NotFound(pool.Ref.Name)
	}
	name := v1alpha1.PoolSessionName(pool.Ref.Name, r.keyHash)
	owner := sessionroute.PoolOwner{Pool: pool.Ref.Name, UID: pool.Sessions.UID, Class: pool.AgentClass,
		IdleTimeout: pool.Sessions.IdleTimeout, WorkspaceSizeLimit: pool.Sessions.WorkspaceSizeLimit, MaxActive: pool.Sessions.MaxActive}
	// A copy: the snapshot's pool is shared by every request; this one routes to one pod.
	cp := *pool
	r.pool, r.keyHash, r.session = &cp, "", true
	return r.serveSession(ctx, func(ctx context.Context) (route.Endpoint, *openai.Error) {
		return e.AgentSessions.AwaitPool(ctx, pool.Ref.Namespace, name, owner)
	})
}
