// Package engine is the gateway's request path, independent of the client's protocol: identity,
// body checks, model access, the extension points (gateway/stage), the variant selection,
// quotas, admission by priority, session affinity and picking, the backend exchange with one
// retry before the first byte, streaming through the chunk filters, usage billing and metrics.
// The front (gateway/front) turns HTTP, SSE, WebSocket and gRPC into Inbound requests and Sinks.
package engine

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/auth"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionkey"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// Headers the gateway reads and writes.
const (
	// HeaderPriority carries a priority class the tenant is allowed to ask for.
	HeaderPriority = "X-Neuronetes-Priority"
	// HeaderPod names the pod that served the response.
	HeaderPod = "X-Neuronetes-Pod"
	// HeaderPool names the pool that served the response.
	HeaderPool = "X-Neuronetes-Pool"
	// HeaderModel names the model that served the response: the requested one, or the cost
	// fallback pool's.
	HeaderModel = "X-Neuronetes-Model"
	// HeaderPin says what happened to the session's pin: held, new, repinned or none.
	HeaderPin = "X-Neuronetes-Pin"
	// HeaderRequestID is the gateway's request id (also sent to the backend).
	HeaderRequestID = "X-Request-Id"
	// HeaderTenant tells the backend the caller's tenant.
	HeaderTenant = "X-Neuronetes-Tenant"
	// HeaderConversation carries the tenant-scoped session key (gateway/sessionkey) to the
	// backend, never the client's raw key (the demo agent and the sidecar key session memory by
	// it).
	HeaderConversation = "X-Conversation-Id"
	// HeaderSession carries the scoped session key to the backend too.
	HeaderSession = "X-Session-Id"
	// HeaderGateway names the gateway replica that served the response.
	HeaderGateway = "X-Neuronetes-Gateway"
	// HeaderIdempotency is the client's idempotency key: with it the client accepts that a
	// request whose backend failed after receiving it runs again on another pod. The gateway
	// does not forward it (a backend deduplicating on it would mix tenants' keys).
	HeaderIdempotency = "Idempotency-Key"
)

// Pin results (the HeaderPin values and the affinity metric's "result" label, where "held" is
// counted as "hit" and "new" as "miss").
const (
	PinHeld     = "held"
	PinNew      = "new"
	PinRepinned = "repinned"
	PinNone     = "none"
)

// Authenticator maps a request's credentials to a tenant. The error is a 401.
type Authenticator interface {
	Authenticate(ctx context.Context, h http.Header) (*access.Tenant, *openai.Error)
}

// Inbound is a request as the front received it.
type Inbound struct {
	// Route is the API endpoint.
	Route openai.Route
	// Header is the request header (WebSocket and gRPC fronts fill it from the upgrade request
	// or the call's metadata).
	Header http.Header
	// Body is the JSON body.
	Body []byte
	// Protocol is "http", "websocket" or "grpc" (a metrics label; streamed HTTP is "sse").
	Protocol string
	// Tenant, when set, is the caller the front already authenticated.
	Tenant *access.Tenant
	// Session, when set, names the AgentSession (in the caller's namespace) the request goes
	// to, instead of a pool serving its model (Engine.AgentSessions).
	Session string
}

// Meta describes the response.
type Meta struct {
	RequestID, Pool, Pod, Pin, Gateway string
	// Model is the model id of the pool that served the request (HeaderModel).
	Model string
}

// Header writes the meta as response headers.
func (m Meta) Header(h http.Header) {
	if m.RequestID != "" {
		h.Set(HeaderRequestID, m.RequestID)
	}
	if m.Pool != "" {
		h.Set(HeaderPool, m.Pool)
	}
	if m.Model != "" {
		h.Set(HeaderModel, m.Model)
	}
	if m.Pod != "" {
		h.Set(HeaderPod, m.Pod)
	}
	if m.Pin != "" {
		h.Set(HeaderPin, m.Pin)
	}
	if m.Gateway != "" {
		h.Set(HeaderGateway, m.Gateway)
	}
}

// Sink receives a response in the client's protocol. Its methods are called from the request's
// goroutine only.
type Sink interface {
	// Start begins a streamed response; an Event follows at once (a sink may hold the header until
	// then).
	Start(m Meta) error
	// Event sends one chunk (the JSON of an SSE data line).
	Event(data []byte) error
	// Finish ends a streamed response normally.
	Finish() error
	// Response sends a whole non-streamed response.
	Response(m Meta, body []byte) error
	// Fail sends an error: an error response before Start, an error event after it.
	Fail(m Meta, e *openai.Error, started bool) error
}

// EventBuffer is a Sink that can take a streamed event without sending it yet. The relay uses it
// when the backend's next event has already arrived, so events that came together leave
// together, in one write to the client; the next Event, Flush or Finish sends what it holds.
type EventBuffer interface {
	// BufferEvent takes one chunk (as Event) without sending it.
	BufferEvent(data []byte) error
	// Flush sends what BufferEvent took.
	Flush() error
}

// FrameWriter is an EventBuffer whose events can be given whole: an SSE frame, "data: ", the
// event's data and "\n\n", as the model server wrote it. The relay gives a chunk it forwards
// unchanged this way when the reader has its frame (proxy.EventReader.Frame), so the sink need
// not frame it again.
type FrameWriter interface {
	EventBuffer
	// EventFrame sends one framed event (as Event).
	EventFrame(frame []byte) error
	// BufferEventFrame takes one framed event without sending it (as BufferEvent).
	BufferEventFrame(frame []byte) error
}

// Config are the engine's settings.
type Config struct {
	// MaxResponseBytes bounds a non-streamed backend response (default 16 MiB).
	MaxResponseBytes int64
	// ShadowParallel bounds the shadow copies in flight (default 64); beyond it copies are dropped.
	ShadowParallel int
	// BlockedAsError answers guardrail blocks the legacy way: a blocked request or non-streamed
	// answer is a 400 error (content_blocked, content_filter) and a blocked stream ends with an
	// error event. By default a block is a 200 completion that finishes with "content_filter",
	// as OpenAI answers (docs/guardrails.md).
	BlockedAsError bool
}

// Engine runs requests.
type Engine struct {
	Table *route.Table
	Auth  Authenticator // nil: every caller is Anonymous
	// Anonymous is the tenant of every caller when Auth is nil (nil: access.Anonymous).
	Anonymous *access.Tenant
	// Dispatcher authenticates the dispatcher's calls for a named pool before Auth is asked
	// (nil: none are accepted, and a request naming a target pool is refused).
	Dispatcher *auth.Dispatcher
	Pins       *affinity.Store
	Picker     *pick.Picker
	// KVPrompt tokenizes a request as the pods' engine does, for the picker's exact KV index
	// (kvindex.DemoPrompt; nil: no request is matched exactly).
	KVPrompt  func(*openai.Request) *kvindex.Prompt
	Quota     *quota.Limiter // nil: no quotas
	Admission *quota.Admission
	// Peers counts the replicas sharing the pods (nil: this one alone); admission takes this
	// replica's share of each pool's capacity.
	Peers    *quota.Peers
	Upstream *proxy.Upstream
	Metrics  *metrics.Metrics
	Pools    *metrics.PoolStats
	Ext      stage.Extensions
	// AgentSessions routes requests naming an AgentSession (nil: every such request gets 404).
	AgentSessions SessionRouter
	// Sessions scopes session keys by tenant (nil: a secret of this process, see
	// sessionkey.Random); every replica sharing pins must hold the same secret.
	Sessions *sessionkey.Scoper
	Cfg      Config
	// Replica names this gateway replica in responses (HeaderGateway); "" sends none.
	Replica string
	// Now is the clock (default time.Now).
	Now func() time.Time

	seq       atomic.Uint64
	idPrefix  string
	shadowSem chan struct{}
}

// Init prepares the engine; call once before serving.
func (e *Engine) Init() {
	if e.Cfg.MaxResponseBytes <= 0 {
		e.Cfg.MaxResponseBytes = 16 << 20
	}
	if e.Cfg.ShadowParallel <= 0 {
		e.Cfg.ShadowParallel = 64
	}
	e.shadowSem = make(chan struct{}, e.Cfg.ShadowParallel)
	e.idPrefix = strconv.FormatInt(time.Now().UnixNano()&0xffffffffff, 36) + "-"
	if e.Sessions == nil {
		e.Sessions = sessionkey.Random()
	}
	if e.Ext.Selector == nil {
		e.Ext.Selector = stage.DefaultSelector{}
	}
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) newID() string {
	return "gw-" + e.idPrefix + strconv.FormatUint(e.seq.Add(1), 36)
}

// Authenticate resolves the caller (Anonymous without an Authenticator).
func (e *Engine) Authenticate(ctx context.Context, h http.Header) (*access.Tenant, *openai.Error) {
	if t, ok, err := e.Dispatcher.Authenticate(h); ok {
		if err != nil {
			e.Metrics.Rejected.WithLabelValues(err.Reason).Inc()
		}
		return t, err
	}
	if e.Auth == nil {
		if e.Anonymous != nil {
			return e.Anonymous, nil
		}
		return access.Anonymous, nil
	}
	t, err := e.Auth.Authenticate(ctx, h)
	if err != nil {
		e.Metrics.Rejected.WithLabelValues(err.Reason).Inc()
	}
	return t, err
}

// Models lists the model ids the tenant may use.
func (e *Engine) Models(t *access.Tenant) []string {
	all := e.Table.Load().Models(t.Namespace)
	out := make([]string, 0, len(all))
	for _, m := range all {
		if t.Allows(m) {
			out = append(out, m)
		}
	}
	return out
}
