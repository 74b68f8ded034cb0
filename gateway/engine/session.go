package engine

import (
	"context"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// SessionRouter resolves a request that names an AgentSession to the session's pod, holding it
// while the session starts or resumes (gateway/sessionroute.Router).
type SessionRouter interface {
	Await(ctx context.Context, namespace, name string) (route.Endpoint, *openai.Error)
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
	return r.serveSession(ctx, name)
}

// serveSession applies the tenant's quota, waits for the session to serve and dispatches to its
// pod. A held request counts against the tenant's concurrency quota while it waits.
func (r *request) serveSession(ctx context.Context, name string) *openai.Error {
	e := r.e
	if e.Quota != nil {
		g, qerr := e.Quota.Admit(ctx, r.tenant.Key(), r.pool.Ref.String(), r.tenant.QuotaFor(r.pool.Ref.Name), r.promptTokens+r.body.CompletionBudget())
		if qerr != nil {
			return qerr
		}
		defer func() { g.Settle(ctx, r.billed()) }()
	}
	ep, aerr := e.AgentSessions.Await(ctx, r.tenant.Namespace, name)
	if aerr != nil {
		return aerr
	}
	r.pool.Endpoints = []route.Endpoint{ep}
	return r.dispatch(ctx)
}
