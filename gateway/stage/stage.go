// Package stage defines the gateway's extension points: small interfaces the request path calls,
// which other packages (the guardrails in gateway/guard, rollouts in gateway/rollout) implement.
// The gateway knows nothing of what they check or how they split traffic.
//
// Order in the request path (docs/gateway.md, "Extension points"):
//
//  1. authentication, body parsing and model access;
//  2. every RequestStage, in order: allow, block, redact (change the request) or flag;
//  3. the VariantSelector chooses one pool among those that serve the model;
//  4. quotas and admission; then every Mirror may ask for shadow copies of the admitted request
//     to other pools;
//  5. session affinity and picking, then the backend;
//  6. every response chunk passes the StreamFilters of the ChunkFilters, in order;
//  7. every Observer receives the Outcome.
package stage

import (
	"context"
	"net/http"
	"time"

	"github.com/neuronetes/neuronetes/gateway/openai"
)

// PoolRef names an AgentPool.
type PoolRef struct {
	// Namespace of the pool ("" in static-backends mode).
	Namespace string
	// Name of the pool.
	Name string
}

// String is "namespace/name", or the name alone without a namespace.
func (p PoolRef) String() string {
	if p.Namespace == "" {
		return p.Name
	}
	return p.Namespace + "/" + p.Name
}

// Candidate is a pool that serves the requested model and that the caller may use.
type Candidate struct {
	// Pool names the AgentPool.
	Pool PoolRef
	// AgentClass is the pool's AgentClass.
	AgentClass string
	// Ready counts the pool's endpoints that can take requests now.
	Ready int
}

// Request is what the extension points see of one request. Stages may change Body (through its
// setters); the gateway forwards the changed body.
type Request struct {
	// ID is the gateway's request id (also sent to the backend as X-Request-ID).
	ID string
	// Tenant is "namespace/name" of the caller's Tenant ("anonymous" without authentication).
	Tenant string
	// Model is the requested model id.
	Model string
	// SessionKey is the session key scoped by the caller's tenant (gateway/sessionkey), ""
	// when the request has none; never the raw key the client sent.
	SessionKey string
	// Header is the client's request header (read-only; credentials removed).
	Header http.Header
	// Body is the decoded request body.
	Body *openai.Request
	// Candidates are the pools that can serve the request, in a stable order.
	Candidates []Candidate
	// Pool is the pool chosen for the request (set after the VariantSelector ran).
	Pool PoolRef
	// Flags collects the names of RequestStages that flagged the request.
	Flags []string
}

// Action is what a RequestStage decides.
type Action int

// Actions of a RequestStage.
const (
	// Allow passes the request unchanged.
	Allow Action = iota
	// Redact passes the request after the stage changed Body.
	Redact
	// Flag passes the request and records the stage's reason (metrics, logs, Outcome).
	Flag
	// Block rejects the request; nothing is sent to a pod.
	Block
)

// Decision is a RequestStage's verdict.
type Decision struct {
	// Action to take.
	Action Action
	// Reason is shown to the client on Block and recorded on Flag. It must not contain the
	// matched text.
	Reason string
	// Status is the HTTP status of a Block (default 400: a policy decision, which the gateway
	// answers on chat and completions with a 200 completion that finishes with
	// "content_filter" unless configured for errors; any other status is an error).
	Status int
	// Code is the error code of a Block's body (default "content_blocked").
	Code string
}

// RequestStage inspects a request before it is routed.
type RequestStage interface {
	// Name identifies the stage in metrics and logs.
	Name() string
	// Check decides on req. An error fails the request with 500 unless the stage chooses
	// to fail open itself (then it returns Allow and logs).
	Check(ctx context.Context, req *Request) (Decision, error)
}

// ChunkFilter makes one StreamFilter per response. Non-streamed responses pass through a
// StreamFilter too, as one Write of the whole text per choice followed by Close.
type ChunkFilter interface {
	// Name identifies the filter in metrics and logs.
	Name() string
	// NewStream returns the filter of one response, or nil to leave this response alone.
	NewStream(ctx context.Context, req *Request) StreamFilter
}

// StreamFilter transforms the texts of one response, stream by stream, as they arrive. Every text
// of every choice is its own stream (the content, the reasoning, each tool call's arguments),
// identified by an opaque key; texts of one key continue each other. It may hold back text (for
// example the tail of a chunk that could begin a value split across chunks), but its hold-back
// must be bounded; Close returns whatever it still holds.
type StreamFilter interface {
	// Write takes the next text of stream key and returns the text to send now.
	Write(key int, text string) (string, error)
	// Close ends key's text and returns the rest to send.
	Close(key int) (string, error)
	// Blocked reports a reason when the filter decided the response must stop; the gateway then
	// ends the answer with finish_reason "content_filter" (or, configured so, an error).
	Blocked() (reason string, blocked bool)
}

// VariantSelector chooses the pool of a request among req.Candidates (at least one). It runs
// after the RequestStages and before session affinity, so a session key's hash can keep a
// conversation on one variant.
type VariantSelector interface {
	// Select returns the chosen pool; it must be one of req.Candidates.
	Select(ctx context.Context, req *Request) (PoolRef, error)
}

// Shadow is one mirrored copy of a request.
type Shadow struct {
	// Pool receives the copy.
	Pool PoolRef
	// Body is the copy's request; nil sends req.Body unchanged. A mirror that must prevent side
	// effects (e.g. tool calls) changes its copy here.
	Body *openai.Request
	// Done, when set, receives the copy's outcome, on the copy's own goroutine; the response
	// itself is discarded.
	Done func(Outcome)
}

// Mirror decides which requests are copied to other pools (shadow traffic). Each copy is encoded
// when Shadows returns, then sent in the background under the backend's response timeout; copies
// never delay or change the client's response, and are dropped when the gateway's shadow capacity
// is full.
type Mirror interface {
	// Shadows returns the copies to send for req (none for most requests).
	Shadows(ctx context.Context, req *Request) []Shadow
}

// Outcome is what happened to a request (or a shadow copy).
type Outcome struct {
	// Pool and Pod that served it ("" when none did).
	Pool PoolRef
	Pod  string
	// Status is the HTTP status sent to the client (200 for streams that started).
	Status int
	// Err describes a failure ("" on success), including a stream that broke after it started.
	Err string
	// TTFT is the time to the first token (0 when none arrived).
	TTFT time.Duration
	// Duration is the whole request's time.
	Duration time.Duration
	// PromptTokens and CompletionTokens as billed.
	PromptTokens, CompletionTokens int
	// Flags are the RequestStage names that flagged the request.
	Flags []string
	// Blocked is the reason a ChunkFilter stopped the response ("" when none did).
	Blocked string
	// Cancelled is true when the client went away before the response ended (Status is then
	// 499): the client's choice, not a failure of the pool.
	Cancelled bool
	// Shadow is true for a mirrored copy.
	Shadow bool
	// ToolCalls counts the tool calls in a shadow copy's response (which is discarded, so none
	// of them reaches the client or runs); 0 for client requests.
	ToolCalls int
}

// Observer receives the outcome of every request after it ended (for example a rollout's
// metric gate). Observe must not block: it is called on the request's goroutine.
type Observer interface {
	Observe(req *Request, out Outcome)
}

// Extensions are the implementations the gateway calls. Every field is optional.
type Extensions struct {
	// Stages run in order before routing.
	Stages []RequestStage
	// Filters run in order over every response.
	Filters []ChunkFilter
	// Selector chooses among candidate pools (default: DefaultSelector).
	Selector VariantSelector
	// Mirrors request shadow copies.
	Mirrors []Mirror
	// Observers receive outcomes.
	Observers []Observer
	// Handlers are extra HTTP handlers mounted on the gateway's API port by path pattern (for
	// example "POST /analyze"); the gateway authenticates their callers as it does API calls.
	Handlers map[string]http.Handler
	// AdminHandlers are extra handlers mounted on the gateway's admin port, unauthenticated:
	// that port is reachable only from the controller and the monitoring namespace (the
	// chart's NetworkPolicy). For clients that cannot send the gateway's credentials (stock
	// Presidio clients on "POST /analyze").
	AdminHandlers map[string]http.Handler
}
