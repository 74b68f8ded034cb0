package engine

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// request is the state of one request through the engine.
type request struct {
	e      *Engine
	in     Inbound
	sink   Sink
	eb     EventBuffer // sink, when it can hold events (looked up once per request)
	fw     FrameWriter // sink, when it takes framed events
	start  time.Time
	meta   Meta
	tenant *access.Tenant
	body   *openai.Request
	sreq   *stage.Request
	pool   *route.Pool
	prio   route.Priority
	// promptTokens is the estimate before usage is known.
	promptTokens int
	blocks       []uint64
	kvPrompt     *kvindex.Prompt // the prompt as the engine tokenizes it (nil: not matched exactly)
	// keyHash is the scoped session key the pins and activity are kept under.
	keyHash string
	// queued tracks this request's tokens in the pool's tokens-in-queue view.
	queuedPod string
	queued    bool
	out       stage.Outcome
	started   bool
	held      bool // the sink holds events not yet sent (EventBuffer)
	usage     usageState
	// lease is the current attempt's share of its pod's load.
	lease *pick.Lease
	// sent is when the current attempt was sent to its pod.
	sent time.Time
	// filtered is set when a RequestStage blocked the request and it is answered with a
	// content_filter completion.
	filtered bool
	// session is set on an AgentSession route: no idle connection to the pod is kept.
	session bool
}

// Handle runs one request and writes its response to sink.
func (e *Engine) Handle(ctx context.Context, in Inbound, sink Sink) {
	r := &request{e: e, in: in, sink: sink, start: e.now(), meta: Meta{RequestID: e.newID(), Gateway: e.Replica}}
	r.eb, _ = sink.(EventBuffer)
	r.fw, _ = sink.(FrameWriter)
	logger := klog.FromContext(ctx).WithValues("requestID", r.meta.RequestID)
	ctx = klog.NewContext(ctx, logger)
	if err := r.run(ctx); err != nil {
		r.fail(ctx, err)
	}
	r.finish(ctx)
}

// run is the request path; an *openai.Error it returns is sent to the client.
func (r *request) run(ctx context.Context) *openai.Error {
	e := r.e
	r.tenant = r.in.Tenant
	if r.tenant == nil {
		t, aerr := e.Authenticate(ctx, r.in.Header)
		if aerr != nil {
			return aerr
		}
		r.tenant = t
	}
	if k := r.in.Header.Get(HeaderIdempotency); k != "" && !validIdempotencyKey(k) {
		return openai.BadRequest(HeaderIdempotency, "header %s must be 1 to 255 printable ASCII characters", HeaderIdempotency)
	}
	body, err := openai.Parse(r.in.Route, r.in.Body)
	if err != nil {
		return asAPIError(err)
	}
	r.body = body
	if r.in.Session != "" {
		return r.runSession(ctx)
	}
	pools, aerr := r.resolve()
	if aerr != nil {
		return aerr
	}
	if aerr := r.stages(ctx, pools); aerr != nil {
		return aerr
	}
	if r.filtered {
		return r.answerFiltered()
	}
	if aerr := r.selectPool(ctx, pools); aerr != nil {
		return aerr
	}
	if aerr := r.priority(); aerr != nil {
		return aerr
	}
	if r.pool.Sessions != nil {
		return r.runPoolSession(ctx)
	}
	return r.serve(ctx)
}

// resolve finds the pools serving the model for the tenant. A model the tenant may not use and
// a model nothing serves get the same 404 model_not_found, as OpenAI answers, so a caller
// cannot tell another tenant's model from a missing one; the metric tells them apart.
func (r *request) resolve() ([]*route.Pool, *openai.Error) {
	model := r.body.Model
	var pools []*route.Pool
	reason := "forbidden_model"
	switch {
	case r.tenant.Pool != nil:
		// The dispatcher's call for one pool: that pool or nothing, never another serving the
		// same model (a rollout's canary included).
		if p, ok := r.e.Table.Load().Pool(*r.tenant.Pool); ok && (p.Model == model || p.Model == "") {
			pools = []*route.Pool{p}
		}
		reason = "model_not_found"
	case r.tenant.Allows(model):
		pools, reason = r.e.Table.Load().Resolve(r.tenant.Namespace, model), "model_not_found"
	}
	if len(pools) == 0 {
		r.e.Metrics.Rejected.WithLabelValues(reason).Inc()
		return nil, ModelNotFound(model)
	}
	return pools, nil
}

// ModelNotFound is OpenAI's answer for a model that does not exist or that the caller may not
// use; the message is the same in both cases.
func ModelNotFound(model string) *openai.Error {
	e := openai.NewError(http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
		"The model `%s` does not exist or you do not have access to it.", model)
	e.Reason = ""
	return e
}

// stages runs the RequestStages.
func (r *request) stages(ctx context.Context, pools []*route.Pool) *openai.Error {
	key, aerr := r.sessionKey(pools[0])
	if aerr != nil {
		return aerr
	}
	cands := make([]stage.Candidate, len(pools))
	for i, p := range pools {
		cands[i] = stage.Candidate{Pool: p.Ref, AgentClass: p.AgentClass, Ready: len(p.Endpoints)}
	}
	h := r.in.Header.Clone()
	h.Del("Authorization")
	h.Del("X-Api-Key")
	r.sreq = &stage.Request{ID: r.meta.RequestID, Tenant: r.tenant.Key(), Model: r.body.Model, SessionKey: key,
		Header: h, Body: r.body, Candidates: cands}
	for _, s := range r.e.Ext.Stages {
		d, err := s.Check(ctx, r.sreq)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Request stage failed", "stage", s.Name())
			return openai.NewError(http.StatusInternalServerError, "server_error", "stage_error", "",
				"request check %s failed", s.Name())
		}
		switch d.Action {
		case stage.Block:
			r.e.Metrics.Stages.WithLabelValues(s.Name(), "block").Inc()
			st, code := d.Status, d.Code
			if st == 0 {
				st = http.StatusBadRequest
			}
			if code == "" {
				code = "content_blocked"
			}
			if r.filteredAnswer(st) {
				r.filtered = true
				return nil
			}
			return openai.NewError(st, "invalid_request_error", code, "", "request blocked by %s: %s", s.Name(), d.Reason)
		case stage.Redact:
			r.e.Metrics.Stages.WithLabelValues(s.Name(), "redact").Inc()
		case stage.Flag:
			r.e.Metrics.Stages.WithLabelValues(s.Name(), "flag").Inc()
			r.sreq.Flags = append(r.sreq.Flags, s.Name())
		}
	}
	return nil
}

// sessionKey is the request's session key under pool's policy, scoped by the caller's tenant:
// everything past this point (stages, the variant selector, pins, activity, the ring, the
// backend's conversation headers) sees only the scoped key.
func (r *request) sessionKey(pool *route.Pool) (string, *openai.Error) {
	key, from := affinity.Extract(pool.Policy.SessionKeys, r.in.Header, r.body)
	if err := affinity.CheckKey(key); err != nil {
		param := from.Header
		if param == "" {
			param = from.Body
		}
		return "", openai.BadRequest(param, "%s: %v", from.String(), err)
	}
	return r.e.Sessions.Scope(r.tenant, key), nil
}

// selectPool runs the VariantSelector and settles the session key with the chosen pool's
// policy.
func (r *request) selectPool(ctx context.Context, pools []*route.Pool) *openai.Error {
	ref, err := r.e.Ext.Selector.Select(ctx, r.sreq)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Variant selection failed")
		return openai.NewError(http.StatusInternalServerError, "server_error", "select_error", "", "variant selection failed")
	}
	for _, p := range pools {
		if p.Ref == ref {
			r.pool = p
		}
	}
	if r.pool == nil {
		klog.FromContext(ctx).Error(nil, "Variant selector chose a pool that is not a candidate", "pool", ref.String())
		return openai.NewError(http.StatusInternalServerError, "server_error", "select_error", "", "variant selection failed")
	}
	r.sreq.Pool = ref
	r.meta.Pool = ref.String()
	key, aerr := r.sessionKey(r.pool)
	if aerr != nil {
		return aerr
	}
	r.sreq.SessionKey, r.keyHash = key, key
	if err := r.e.Sessions.ScopeFields(r.tenant, r.body, r.pool.Policy.SessionKeys); err != nil {
		return openai.BadRequest("metadata", "%v", err)
	}
	r.costFallback(ctx)
	r.meta.Model = r.modelLabel() // the fallback's model after a cost fallback
	text := r.body.PromptText()
	r.promptTokens = openai.EstimateTokens(text)
	if w := r.pool.Policy.Weights; r.e.Picker.Prefix != nil && (w.PrefixCache > 0 || w.Prefill > 0) {
		r.blocks = r.e.Picker.Prefix.Blocks(r.pool.Ref, text)
	}
	if r.e.KVPrompt != nil && r.e.Picker.KV != nil {
		r.kvPrompt = r.e.KVPrompt(r.body)
	}
	return nil
}

// priority is the header's class when the tenant may set it, else the pool's. Asking for the
// pool's own class needs no grant: it changes nothing.
func (r *request) priority() *openai.Error {
	r.prio = r.pool.Policy.Priority
	v := r.in.Header.Get(HeaderPriority)
	if v == "" {
		return nil
	}
	p, ok := route.ParsePriority(v)
	if !ok {
		return openai.BadRequest(HeaderPriority, "header %s must be high, normal or low, got %q", HeaderPriority, v)
	}
	if p != r.prio && !r.tenant.Priorities[p] {
		return openai.NewError(http.StatusForbidden, "permission_denied", "forbidden_priority", HeaderPriority,
			"priority %q is not allowed for this caller", v)
	}
	r.prio = p
	return nil
}

// serve applies quotas and admission, then dispatches.
func (r *request) serve(ctx context.Context) *openai.Error {
	e := r.e
	maxTok := r.body.CompletionBudget()
	estimate := r.promptTokens + maxTok
	var grant *quota.Grant
	if e.Quota != nil {
		g, qerr := e.Quota.Admit(ctx, r.tenant.Key(), r.pool.Ref.String(), r.tenant.QuotaFor(r.pool.Ref.Name), estimate)
		if qerr != nil {
			return qerr
		}
		grant = g
	}
	defer func() { grant.Settle(ctx, r.billed()) }()
	// Offered demand: counted at arrival, before any endpoint or queue (docs/autoscaling.md).
	e.Pools.ObserveArrival(r.pool.Ref, r.promptTokens)
	if len(r.pool.Endpoints) == 0 {
		er := openai.NewError(http.StatusServiceUnavailable, "service_unavailable", "no_endpoint", "",
			"pool %s has no ready endpoint", r.pool.Ref.String())
		er.RetryAfter = time.Second
		return er
	}
	r.setQueued("")
	poolLabel := r.pool.Ref.String()
	e.Metrics.Queued.WithLabelValues(poolLabel).Inc()
	ticket, aerr := e.Admission.Enter(ctx, r.pool.Ref, quota.Limits{
		Capacity: quota.Share(len(r.pool.Endpoints)*r.pool.Policy.MaxInFlightPerEndpoint, e.Peers.Count()),
		MaxQueue: r.pool.Policy.MaxQueue, Timeout: r.pool.Policy.QueueTimeout}, r.prio)
	e.Metrics.Queued.WithLabelValues(poolLabel).Dec()
	if aerr != nil {
		return aerr
	}
	defer ticket.Done()
	e.Metrics.QueueWait.WithLabelValues(poolLabel, r.prio.String()).Observe(ticket.Waited.Seconds())
	// Only admitted requests are mirrored: a refusal's copy would load the shadow pool with
	// traffic the live pool never served.
	r.mirror(ctx)
	return r.dispatch(ctx)
}

// setQueued moves the request's prompt tokens in the tokens-in-queue view to pod ("" before a
// pod is chosen).
func (r *request) setQueued(pod string) {
	ps := r.e.Pools
	if r.queued {
		ps.AddQueued(r.pool.Ref, r.queuedPod, -r.promptTokens)
	}
	ps.AddQueued(r.pool.Ref, pod, r.promptTokens)
	r.queued, r.queuedPod = true, pod
}

// dequeue removes the request from the tokens-in-queue view (its first token arrived, or it
// ended).
func (r *request) dequeue() {
	if r.queued {
		r.e.Pools.AddQueued(r.pool.Ref, r.queuedPod, -r.promptTokens)
		r.queued = false
	}
}

// billed is the tokens to bill: usage when known, else the estimate of the prompt plus the
// counted completion; 0 when no pod was sent the request (the whole estimate is returned).
func (r *request) billed() int {
	if r.out.Pod == "" {
		return 0
	}
	return r.out.PromptTokens + r.out.CompletionTokens
}

// fail sends err to the client.
func (r *request) fail(ctx context.Context, err *openai.Error) {
	if r.out.Status == 0 || !r.started {
		r.out.Status = err.Status
	}
	if err.Status == StatusClientClosed {
		r.out.Cancelled, r.out.Status = true, StatusClientClosed
	}
	r.out.Err = err.Body.Message
	if !r.started && err.Reason != "" {
		r.e.Metrics.Rejected.WithLabelValues(err.Reason).Inc()
	}
	if werr := r.sink.Fail(r.meta, err, r.started); werr != nil {
		klog.FromContext(ctx).V(2).Info("Client gone before the error was sent", "err", werr)
	}
}

// finish records the outcome.
func (r *request) finish(ctx context.Context) {
	r.dequeue()
	if r.out.Status == 0 {
		r.out.Status = http.StatusOK
	}
	r.out.Duration = r.e.now().Sub(r.start)
	if r.pool != nil {
		r.out.Pool = r.pool.Ref
	}
	if r.sreq != nil {
		r.out.Flags = r.sreq.Flags
	}
	proto := r.in.Protocol
	if proto == "http" && r.body != nil && r.body.Stream {
		proto = "sse"
	}
	poolLabel := ""
	if r.pool != nil {
		poolLabel = r.pool.Ref.String()
	}
	r.e.Metrics.Requests.WithLabelValues(poolLabel, strconv.Itoa(r.out.Status), proto).Inc()
	if r.sreq != nil {
		for _, o := range r.e.Ext.Observers {
			o.Observe(r.sreq, r.out)
		}
	}
	klog.FromContext(ctx).V(4).Info("Request done", "pool", poolLabel, "pod", r.out.Pod, "status", r.out.Status,
		"ttft", r.out.TTFT, "duration", r.out.Duration, "err", r.out.Err)
}

// validIdempotencyKey: 1 to 255 printable ASCII characters.
func validIdempotencyKey(k string) bool {
	if len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func asAPIError(err error) *openai.Error {
	if ae, ok := err.(*openai.Error); ok {
		return ae
	}
	return openai.BadRequest("", "%v", err)
}

// pickInput is the picker's input for this request.
func (r *request) pickInput(exclude map[string]bool) pick.Input {
	in := pick.Input{RingKey: r.sreq.SessionKey, Blocks: r.blocks, PromptTokens: r.promptTokens, Exclude: exclude, KV: r.kvPrompt}
	if r.kvPrompt != nil {
		in.PromptTokens = r.kvPrompt.Tokens()
	}
	return in
}

// retryReason labels a retried failure.
func retryReason(err error) string {
	var se *proxy.StatusError
	if errors.As(err, &se) {
		return strconv.Itoa(se.Status)
	}
	return "connect"
}
