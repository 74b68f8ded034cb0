package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
)

// StatusClientClosed is the status recorded for a request whose client went away (nginx's
// 499): nothing is sent, the outcome is Cancelled.
const StatusClientClosed = 499

// errRetry marks a failure before anything reached the client that may be retried.
type errRetry struct{ err error }

func (e *errRetry) Error() string { return e.err.Error() }
func (e *errRetry) Unwrap() error { return e.err }

// dispatch places the request (pin or picker) and exchanges it with the backend, retrying once
// on the next candidate when the first attempt failed before the first byte reached the client
// and the backend cannot have run it (proxy.Retryable), or the client sent an idempotency key.
func (r *request) dispatch(ctx context.Context) *openai.Error {
	e := r.e
	pinned := ""
	if r.keyHash != "" {
		pinned = e.Pins.Lookup(ctx, r.pool.Ref, r.keyHash, r.pool.Policy.PinTTL)
	}
	body, err := r.body.Body()
	if err != nil {
		return openai.NewError(http.StatusInternalServerError, "server_error", "encode", "", "%v", err)
	}
	// Whatever ends the exchange (a client gone mid-write included), what a pod generated is
	// billed: account is once-only, and the quota settles on it afterwards.
	defer func() {
		if r.out.Pod != "" {
			r.account()
		}
	}()
	exclude := map[string]bool{}
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		ch, pin, ok := r.choose(ctx, pinned, exclude, attempt)
		if !ok {
			break
		}
		ep := ch.Endpoint
		err := r.attempt(ctx, ch, pin, body)
		if err == nil {
			return nil
		}
		var retry *errRetry
		if !errors.As(err, &retry) || attempt == 1 || ctx.Err() != nil {
			return r.upstreamError(ctx, err)
		}
		last = retry.err
		exclude[ep.Pod] = true
		e.Metrics.Retries.WithLabelValues(r.pool.Ref.String(), retryReason(retry.err)).Inc()
		klog.FromContext(ctx).V(2).Info("Retrying on another pod", "pod", ep.Pod, "err", retry.err)
	}
	if last != nil {
		return r.upstreamError(ctx, last)
	}
	er := openai.NewError(http.StatusServiceUnavailable, "service_unavailable", "no_endpoint", "",
		"pool %s has no ready endpoint", r.pool.Ref.String())
	er.RetryAfter = time.Second
	return er
}

// idempotent reports whether the client sent an idempotency key (checked by run).
func (r *request) idempotent() bool {
	return r.in.Header.Get(HeaderIdempotency) != ""
}

// choose returns the pinned pod when it is routable, not excluded and under its load bound;
// otherwise the picker's choice, logged with what the picker saw at verbosity 5 (the routing
// bench reads it).
func (r *request) choose(ctx context.Context, pinned string, exclude map[string]bool, attempt int) (pick.Choice, string, bool) {
	p := r.e.Picker
	in := r.pickInput(exclude)
	logger := klog.FromContext(ctx).V(5)
	in.Explain = logger.Enabled()
	if pinned != "" && !exclude[pinned] {
		if ep, ok := r.pool.Endpoint(pinned); ok && p.UnderBound(r.pool, pinned) {
			return pick.Choice{Endpoint: ep, Uncached: p.Uncached(in, ep)}, PinHeld, true
		}
	}
	ep, ok := p.Pick(r.pool, in)
	if !ok {
		return pick.Choice{}, "", false
	}
	if in.Explain {
		logger.Info("Picked", "requestID", r.meta.RequestID, "pod", ep.Pod, "candidates", pick.FormatConsidered(ep.Considered),
			"afterReceived", r.e.now().Sub(r.start).String())
	}
	switch {
	case r.keyHash == "":
		return ep, PinNone, true
	case pinned == "" && attempt == 0:
		return ep, PinNew, true
	}
	return ep, PinRepinned, true
}

// attempt sends the request to the chosen endpoint and relays the answer.
func (r *request) attempt(ctx context.Context, ch pick.Choice, pin string, body []byte) error {
	e := r.e
	ep := ch.Endpoint
	maxTok := r.body.CompletionBudget()
	lease := e.Picker.Load.Acquire(r.pool.Ref, ep.Pod, r.promptTokens+maxTok, ch.Uncached)
	defer lease.Release()
	r.lease = lease
	poolLabel := r.pool.Ref.String()
	e.Metrics.InFlight.WithLabelValues(poolLabel).Inc()
	defer e.Metrics.InFlight.WithLabelValues(poolLabel).Dec()
	r.setQueued(ep.Pod)

	r.sent = e.now()
	x, err := e.Upstream.Send(ctx, ep.Addr, r.body.Route.Path(), body, r.backendHeader(), r.body.Stream)
	if err != nil {
		if ctx.Err() == nil && proxy.Retryable(err, r.idempotent()) {
			return &errRetry{err}
		}
		return err
	}
	defer x.Close()
	r.meta.Pod, r.meta.Pin = ep.Pod, pin
	r.out.Pod = ep.Pod
	r.out.PromptTokens = r.promptTokens
	if r.keyHash != "" && pin != PinHeld {
		e.Pins.Pin(ctx, r.pool.Ref, r.keyHash, ep.Pod, r.pool.Policy.PinTTL)
	}
	if len(r.blocks) > 0 {
		e.Picker.Prefix.Record(r.blocks, ep.Pod)
	}
	e.Metrics.Affinity.WithLabelValues(poolLabel, affinityResult(pin)).Inc()
	if !r.body.Stream {
		return r.relayWhole(ctx, x)
	}
	return r.relayStream(ctx, x)
}

func affinityResult(pin string) string {
	switch pin {
	case PinHeld:
		return "hit"
	case PinNew:
		return "miss"
	case PinRepinned:
		return "repin"
	}
	return "none"
}

// backendHeader is the header sent to the model server: no client credentials; the session key,
// tenant and request id; trace context passed through.
func (r *request) backendHeader() http.Header {
	h := make(http.Header, 8)
	h.Set("Content-Type", "application/json")
	if r.body.Stream {
		h.Set("Accept", "text/event-stream")
	}
	h.Set(HeaderRequestID, r.meta.RequestID)
	h.Set(HeaderTenant, r.tenant.Key())
	if r.session {
		// An idle keep-alive connection would be an established TCP connection of the
		// session's process when it is checkpointed, which CRIU refuses to dump: the
		// connection closes after each request.
		h.Set("Connection", "close")
	}
	if k := r.sreq.SessionKey; k != "" {
		h.Set(HeaderConversation, k)
		h.Set(HeaderSession, k)
	}
	for _, k := range []string{"Traceparent", "Tracestate"} {
		if v := r.in.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return h
}

// upstreamError maps a backend failure to the client's error.
func (r *request) upstreamError(ctx context.Context, err error) *openai.Error {
	if ae, ok := err.(*openai.Error); ok {
		return ae
	}
	var be *blockError
	if ctx.Err() != nil || errors.As(err, new(*clientGoneError)) {
		return openai.NewError(StatusClientClosed, "cancelled", "client_closed", "", "client closed the request")
	}
	var se *proxy.StatusError
	switch {
	case errors.As(err, &be):
		return openai.NewError(http.StatusBadRequest, "content_filter", "response_blocked", "", "%s", be.Error())
	case errors.As(err, &se):
		if se.Status < 500 {
			// The backend's own verdict on the request (e.g. a 400 for a bad parameter) is the
			// client's to read.
			e := openai.NewError(se.Status, "invalid_request_error", "backend_"+http.StatusText(se.Status), "", "%s", backendMessage(se.Body))
			e.RetryAfter = se.RetryAfter
			return e
		}
		if se.Status == http.StatusServiceUnavailable {
			e := openai.NewError(se.Status, "service_unavailable", "backend_unavailable", "", "backend unavailable: %s", backendMessage(se.Body))
			e.RetryAfter = max(se.RetryAfter, time.Second)
			return e
		}
		return openai.NewError(http.StatusBadGateway, "server_error", "backend_error", "", "backend error %d: %s", se.Status, backendMessage(se.Body))
	case errors.Is(err, proxy.ErrFirstTokenTimeout), errors.Is(err, proxy.ErrResponseTimeout), errors.Is(err, proxy.ErrIdleTimeout):
		return openai.NewError(http.StatusGatewayTimeout, "timeout", "backend_timeout", "", "%v", err)
	}
	return openai.NewError(http.StatusBadGateway, "server_error", "backend_unreachable", "", "%v", err)
}

// backendMessage extracts an OpenAI error message from a backend body, else the body itself.
func backendMessage(b []byte) string {
	var eb struct {
		Error openai.ErrorBody `json:"error"`
	}
	if json.Unmarshal(b, &eb) == nil && eb.Error.Message != "" {
		return eb.Error.Message
	}
	if len(b) > 512 {
		b = b[:512]
	}
	return string(b)
}
