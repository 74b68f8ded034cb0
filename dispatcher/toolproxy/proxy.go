package toolproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/dispatcher/metrics"
)

// UnknownToolLabel is the metrics' tool_name of a call to a tool that the registry does not
// serve to the caller (the path names any string).
const UnknownToolLabel = "unknown"

// MaxArgumentBytes bounds a call's arguments.
const MaxArgumentBytes = 1 << 20

// IdempotencyTTL is how long an answer to a side-effecting call is replayed.
const IdempotencyTTL = 24 * time.Hour

// claimMargin is what a pending claim outlives its call's timeout by.
const claimMargin = 5 * time.Second

// ClaimLease is how long a pending claim holds a key: the call's timeout plus a margin. A
// replica that dies mid-call leaves a claim that expires with it, so a retry with the key is let
// through then (the tool gets the same key and can deduplicate on its side).
func ClaimLease(timeout time.Duration) time.Duration { return timeout + claimMargin }

// Outcomes recorded in the audit and the metrics.
const (
	OutcomeOK                 = "ok"
	OutcomeToolError          = "tool_error" // the tool answered with a status >= 400
	OutcomeRefusedSchema      = "refused_schema"
	OutcomeRefusedAuth        = "refused_auth"
	OutcomeRefusedIdempotency = "refused_idempotency"
	OutcomeReplayed           = "replayed"
	OutcomeError              = "error"
	OutcomeTimeout            = "timeout"
	OutcomeNotFound           = "not_found"
	OutcomeBadRequest         = "bad_request"
)

// Proxy serves POST /v1/tools/<namespace>/<tool>: the body is the arguments (a JSON document),
// the Idempotency-Key header is required for side-effecting tools.
type Proxy struct {
	Registry *Registry
	Identity Identity
	Invoker  Invoker
	Idem     IdemStore
	Audit    *Audit
	// Metrics (optional) receives neuronetes_tool_latency_seconds and the call counts.
	Metrics *metrics.Metrics
	// AgentClass returns the class of a pool for the latency metric's label (optional).
	AgentClass func(ns, pool string) string
}

// call is one request in progress.
type call struct {
	w     http.ResponseWriter
	entry Entry
	start time.Time
}

// apiError writes an OpenAI-style error body.
func (c *call) apiError(status int, code, param, format string, args ...any) {
	c.entry.Status = status
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(status)
	body := map[string]any{"message": fmt.Sprintf(format, args...), "type": "invalid_request_error", "code": code}
	if param != "" {
		body["param"] = param
	}
	_ = json.NewEncoder(c.w).Encode(map[string]any{"error": body})
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &call{w: w, start: time.Now(), entry: Entry{Time: time.Now().UTC(), RequestID: newID(), ArgBytes: int(max(r.ContentLength, 0))}}
	w.Header().Set("X-Request-Id", c.entry.RequestID)
	defer p.finish(c)
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/tools/")
	ns, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || ns == "" || name == "" || strings.Contains(name, "/") {
		c.entry.Outcome = OutcomeNotFound
		c.apiError(http.StatusNotFound, "not_found", "", "use POST /v1/tools/<namespace>/<tool>")
		return
	}
	c.entry.Namespace, c.entry.Tool = ns, name
	if r.Method != http.MethodPost {
		c.entry.Outcome = OutcomeBadRequest
		w.Header().Set("Allow", http.MethodPost)
		c.apiError(http.StatusMethodNotAllowed, "method_not_allowed", "", "tools are called with POST")
		return
	}
	caller, err := p.Identity.Identify(r)
	if err != nil {
		refuseCaller(c, err)
		return
	}
	c.entry.Pool, c.entry.Session, c.entry.Pod = caller.Pool, caller.Session, caller.Pod
	t := p.Registry.Lookup(ns, name)
	if t == nil || caller.Namespace != ns {
		// The same answer whether the tool exists elsewhere or not at all.
		c.entry.Outcome = OutcomeNotFound
		c.apiError(http.StatusNotFound, "tool_not_found", "", "no tool %q in namespace %s is available to %s", name, ns, caller.Principal())
		return
	}
	c.entry.Binding = t.Key.Name
	if !caller.Allowed(t) {
		c.entry.Outcome = OutcomeRefusedAuth
		if caller.Session != "" {
			c.entry.Error = "session_class_not_allowed"
			c.apiError(http.StatusForbidden, "forbidden_tool", "", "AgentSession %s (AgentClass %s) may not call tool %q (ToolBinding %s: spec.tool.allowedSessionClasses)", caller.Session, caller.SessionClass, name, t.Key.Name)
			return
		}
		c.entry.Error = "pool_not_allowed"
		c.apiError(http.StatusForbidden, "forbidden_tool", "", "AgentPool %s may not call tool %q (ToolBinding %s: spec.agentPoolRef and spec.tool.allowedPools)", caller.Pool, name, t.Key.Name)
		return
	}
	args, err := io.ReadAll(io.LimitReader(r.Body, MaxArgumentBytes+1))
	c.entry.ArgBytes = len(args)
	if err != nil || len(args) > MaxArgumentBytes {
		c.entry.Outcome = OutcomeBadRequest
		c.apiError(http.StatusRequestEntityTooLarge, "arguments_too_large", "arguments", "arguments over %d bytes or unreadable", MaxArgumentBytes)
		return
	}
	p.serve(r.Context(), c, t, caller, r.Header.Get("Idempotency-Key"), args)
}

// serve checks the arguments, applies idempotency and calls the tool.
func (p *Proxy) serve(ctx context.Context, c *call, t *Tool, caller Caller, idemKey string, args []byte) {
	if len(strings.TrimSpace(string(args))) == 0 {
		args = []byte("{}")
	}
	if t.Schema != nil {
		msg, violations, err := Check(t.Schema, args)
		if err != nil || len(violations) > 0 {
			c.entry.Outcome, c.entry.Violations = OutcomeRefusedSchema, violations
			if err != nil {
				msg = err.Error()
			}
			c.apiError(http.StatusBadRequest, "schema_violation", "arguments", "arguments of tool %q do not satisfy spec.tool.parameters of ToolBinding %s: %s", t.Name, t.Key.Name, msg)
			return
		}
	}
	var key string
	if t.SideEffects {
		if idemKey == "" {
			c.entry.Outcome = OutcomeRefusedIdempotency
			c.apiError(http.StatusPreconditionRequired, "idempotency_key_required", "Idempotency-Key", "tool %q has side effects: send an Idempotency-Key header", t.Name)
			return
		}
		key = IdemKey(t.Key.Namespace, t.Name, caller.Principal(), idemKey)
		prev, err := p.Idem.Claim(ctx, key, ArgsDigest(args), ClaimLease(t.Timeout))
		switch {
		case errors.Is(err, ErrInProgress):
			c.entry.Outcome = OutcomeRefusedIdempotency
			c.apiError(http.StatusConflict, "idempotency_in_progress", "Idempotency-Key", "%v", err)
			return
		case errors.Is(err, ErrKeyReused):
			c.entry.Outcome = OutcomeRefusedIdempotency
			c.apiError(http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency-Key", "%v", err)
			return
		case err != nil:
			c.entry.Outcome, c.entry.Error = OutcomeError, "idempotency_store"
			c.apiError(http.StatusServiceUnavailable, "idempotency_unavailable", "", "idempotency store unavailable; not calling a side-effecting tool without it")
			return
		case prev != nil:
			c.entry.Outcome, c.entry.Idempotent = OutcomeReplayed, "replayed"
			c.w.Header().Set("Idempotent-Replayed", "true")
			p.write(c, *prev)
			return
		}
		c.entry.Idempotent = "new"
	}
	cctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	ans, err := p.Invoker.Invoke(cctx, t, caller, idemKey, args)
	if err != nil {
		if key != "" {
			// The tool may or may not have acted: a retry with the key is let through, as the
			// key is forwarded to the tool to deduplicate on its side.
			_ = p.Idem.Abandon(context.WithoutCancel(ctx), key)
		}
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			c.entry.Outcome, c.entry.Error = OutcomeTimeout, "timeout"
			c.apiError(http.StatusGatewayTimeout, "tool_timeout", "", "tool %q did not answer within %s", t.Name, t.Timeout)
			return
		}
		c.entry.Outcome, c.entry.Error = OutcomeError, "unreachable"
		c.apiError(http.StatusBadGateway, "tool_unreachable", "", "tool %q: %v", t.Name, err)
		return
	}
	if key != "" {
		ans.Args = ArgsDigest(args)
		if ans.Status >= 500 {
			_ = p.Idem.Abandon(context.WithoutCancel(ctx), key)
		} else if err := p.Idem.Store(context.WithoutCancel(ctx), key, ans, IdempotencyTTL); err != nil {
			klog.FromContext(ctx).Info("Idempotent answer not stored", "tool", t.Name, "err", err)
		}
	}
	c.entry.Outcome = OutcomeOK
	if ans.Status >= 400 {
		c.entry.Outcome = OutcomeToolError
	}
	p.write(c, ans)
}

func (p *Proxy) write(c *call, a Answer) {
	if a.ContentType != "" {
		c.w.Header().Set("Content-Type", a.ContentType)
	}
	c.entry.Status, c.entry.RespBytes = a.Status, len(a.Body)
	c.w.WriteHeader(a.Status)
	_, _ = c.w.Write(a.Body)
}

func (p *Proxy) finish(c *call) {
	d := time.Since(c.start)
	c.entry.DurationMs = float64(d.Microseconds()) / 1000
	if p.Audit != nil {
		p.Audit.Record(c.entry)
	}
	if p.Metrics != nil {
		// The tool_name label is a tool the registry serves to the caller, never the raw path.
		tool := UnknownToolLabel
		if c.entry.Binding != "" {
			tool = c.entry.Tool
		}
		p.Metrics.ToolCalls.WithLabelValues(tool, c.entry.Pool, c.entry.Outcome).Inc()
		if c.entry.Binding != "" && (c.entry.Outcome == OutcomeOK || c.entry.Outcome == OutcomeToolError || c.entry.Outcome == OutcomeTimeout || c.entry.Outcome == OutcomeError) {
			class := ""
			if p.AgentClass != nil {
				class = p.AgentClass(c.entry.Namespace, c.entry.Pool)
			}
			p.Metrics.ToolLatency.WithLabelValues(tool, class).Observe(d.Seconds())
		}
	}
}
