// Package guard is NeuroNetes' guardrail admission: an ordered chain of checks on requests and on
// streamed responses, with the actions allow, block, redact and flag.
//
// A check is a GuardrailPlugin (the seed's interface): it detects and reports findings, and the
// chain applies the action its policy entry configures. Every check runs under its own timeout
// and fails open or closed as configured. Built-in checks (package pii, package jailbreak,
// patterns and headers) need no network; remote checks call a Presidio-compatible analyzer or a
// generic webhook. Decisions are counted in neuronetes_safety_blocks_total{guardrail_type,
// action} and audited as log lines that carry the tenant, pool, type, action and span lengths,
// never the matched text.
package guard

import (
	"context"
	"net/http"
)

// Action is what a check's detection leads to.
type Action string

// Actions, from the mildest to the strictest.
const (
	// Allow passes the request unchanged.
	Allow Action = "allow"
	// Flag passes the request and records the detection (metric and audit line).
	Flag Action = "flag"
	// Redact replaces every detected span with a placeholder and passes the request.
	Redact Action = "redact"
	// Block rejects the request (or ends the response stream).
	Block Action = "block"
)

// rank orders actions by strictness.
func (a Action) rank() int {
	switch a {
	case Flag:
		return 1
	case Redact:
		return 2
	case Block:
		return 3
	}
	return 0
}

// ParseAction returns the action named s ("" is not an action).
func ParseAction(s string) (Action, bool) {
	switch a := Action(s); a {
	case Allow, Flag, Redact, Block:
		return a, true
	}
	return "", false
}

// Text is one piece of a request that checks read: a message's content or text part, a tool
// call's arguments in the history, a completions prompt string or an embeddings input string.
type Text struct {
	// Role is the message role ("user", "system", ...; "prompt" for completions, "input" for
	// embeddings).
	Role string
	// Text is the content.
	Text string
}

// Request is what a GuardrailPlugin checks.
type Request struct {
	// Tenant is the caller's tenant ("namespace/name").
	Tenant string
	// Pool is the AgentPool ("namespace/name") the request is for, when known.
	Pool string
	// Model is the requested model id.
	Model string
	// Header is the client's request header (credentials removed).
	Header http.Header
	// Texts are the request's texts, in order.
	Texts []Text
}

// Span is one detected value inside Request.Texts[Text].
type Span struct {
	// Text indexes Request.Texts.
	Text int
	// Start and End are byte offsets into that text.
	Start, End int
	// Type is the entity or rule that matched (e.g. "CREDIT_CARD", "instruction_override").
	Type string
	// Score is the detector's confidence in [0, 1].
	Score float64
}

// GuardrailResult is what a plugin reports about one request.
type GuardrailResult struct {
	// Detected is true when the plugin found something its policy entry should act on.
	Detected bool
	// Spans locate the detections; a redacting entry needs them.
	Spans []Span
	// Score is the plugin's overall score (e.g. a jailbreak score), 0 when not meaningful.
	Score float64
	// Reason is a short, text-free description ("CREDIT_CARD", "jailbreak score 0.82").
	Reason string
	// Action, when set, is the plugin's own verdict (a webhook's); it replaces the entry's
	// configured action.
	Action Action
}

// GuardrailPlugin is one check, as the seed defines it.
type GuardrailPlugin interface {
	// Check inspects req. It must honour ctx's deadline; an error is a failed check that the
	// chain resolves by the entry's failure policy.
	Check(ctx context.Context, req *Request) (*GuardrailResult, error)
	// GetType names the kind of check ("pii", "jailbreak", "presidio", "webhook", "pattern",
	// "header"); it is the guardrail_type label of the metrics.
	GetType() string
}
