package guard

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// Flags the guard adds to a request (stage.Request.Flags, and so stage.Outcome.Flags) when it
// redacted or blocked something, so observers such as a rollout's gate count safety actions.
const (
	FlagRequestRedacted = "guardrails:redact"
	FlagRequestBlocked  = "guardrails:block"
	FlagResponseActed   = "guardrails:response"
)

// Policies holds compiled policies by target. Several policies on one target: the first by name
// applies.
type Policies struct {
	mu       sync.RWMutex
	byTarget map[string]map[string]*Policy // "ns/Kind/name" -> policy name -> policy
	// Static applies to every pool (static-backends mode); targets are ignored when set.
	Static *Policy
}

// NewPolicies returns an empty table.
func NewPolicies() *Policies { return &Policies{byTarget: map[string]map[string]*Policy{}} }

func targetKey(ns, kind, name string) string { return ns + "/" + kind + "/" + name }

// Set attaches (or with nil detaches) a policy to a target.
func (p *Policies) Set(ns, kind, name, policy string, pol *Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := targetKey(ns, kind, name)
	if pol == nil {
		delete(p.byTarget[k], policy)
		if len(p.byTarget[k]) == 0 {
			delete(p.byTarget, k)
		}
		return
	}
	if p.byTarget[k] == nil {
		p.byTarget[k] = map[string]*Policy{}
	}
	p.byTarget[k][policy] = pol
}

// For returns the policy of a pool: the pool's own, else its AgentClass's, else nil.
func (p *Policies) For(ns, pool, class string) *Policy {
	if p.Static != nil {
		return p.Static
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, k := range []string{targetKey(ns, "AgentPool", pool), targetKey(ns, "AgentClass", class)} {
		if m := p.byTarget[k]; len(m) > 0 {
			names := make([]string, 0, len(m))
			for n := range m {
				names = append(names, n)
			}
			sort.Strings(names)
			return m[names[0]]
		}
	}
	return nil
}

// Stage is the gateway's guardrail stage: a RequestStage over the request checks and a
// ChunkFilter over the response checks of the target pools' policies.
type Stage struct {
	Policies *Policies
	Metrics  *Metrics
}

// Name implements stage.RequestStage and stage.ChunkFilter.
func (*Stage) Name() string { return "guardrails" }

// policiesFor returns the distinct policies that apply: the chosen pool's once the variant is
// known, else those of every candidate (a request is checked against each pool that may serve
// it, so a rollout's variants cannot be used to dodge a policy).
func (s *Stage) policiesFor(req *stage.Request) []*Policy {
	var out []*Policy
	seen := map[*Policy]bool{}
	add := func(ns, pool, class string) {
		if p := s.Policies.For(ns, pool, class); p != nil && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, c := range req.Candidates {
		if req.Pool.Name == "" || c.Pool == req.Pool {
			add(c.Pool.Namespace, c.Pool.Name, c.AgentClass)
		}
	}
	return out
}

func poolLabel(req *stage.Request) string {
	if req.Pool.Name != "" {
		return req.Pool.String()
	}
	names := make([]string, 0, len(req.Candidates))
	for _, c := range req.Candidates {
		names = append(names, c.Pool.String())
	}
	return strings.Join(names, ",")
}

// Check implements stage.RequestStage.
func (s *Stage) Check(ctx context.Context, req *stage.Request) (stage.Decision, error) {
	pols := s.policiesFor(req)
	if len(pols) == 0 {
		return stage.Decision{Action: stage.Allow}, nil
	}
	texts, refs := textsOf(req)
	gr := &Request{Tenant: req.Tenant, Pool: poolLabel(req), Model: req.Model, Header: req.Header, Texts: texts}
	orig := make([]string, len(gr.Texts))
	for i, t := range gr.Texts {
		orig[i] = t.Text
	}
	worst := Allow
	var reason string
	for _, p := range pols {
		d := p.Request.Run(ctx, gr, Audit{Direction: "request", Tenant: req.Tenant, Pool: gr.Pool})
		if d.Action == Block {
			req.Flags = append(req.Flags, FlagRequestBlocked)
			return blockDecision(d), nil
		}
		if d.Action.rank() > worst.rank() {
			worst, reason = d.Action, d.Reason
		}
	}
	switch worst {
	case Redact:
		if err := writeBack(req, gr, orig, refs); err != nil {
			return stage.Decision{}, err
		}
		req.Flags = append(req.Flags, FlagRequestRedacted)
		return stage.Decision{Action: stage.Redact, Reason: reason}, nil
	case Flag:
		return stage.Decision{Action: stage.Flag, Reason: reason}, nil
	}
	return stage.Decision{Action: stage.Allow}, nil
}

// blockDecision is 400 content_blocked for a detection and 503 guardrail_unavailable for a
// check that failed closed.
func blockDecision(d Decision) stage.Decision {
	for _, c := range d.Checks {
		if c.Name == d.By && c.Err != nil {
			return stage.Decision{Action: stage.Block, Reason: d.Reason, Status: http.StatusServiceUnavailable, Code: "guardrail_unavailable"}
		}
	}
	return stage.Decision{Action: stage.Block, Reason: d.By + ": " + d.Reason, Status: http.StatusBadRequest, Code: "content_blocked"}
}

// textsOf lists every text of the request the caller wrote, whatever the role (system and
// assistant messages are the caller's too): message contents and text parts, the arguments of
// tool calls in the history, the completions prompt's or embeddings input's strings.
func textsOf(req *stage.Request) ([]Text, []openai.TextRef) {
	if req.Body == nil {
		return nil, nil
	}
	fs := req.Body.TextFields()
	texts, refs := make([]Text, len(fs)), make([]openai.TextRef, len(fs))
	for i, f := range fs {
		texts[i], refs[i] = Text{Role: f.Role, Text: f.Text}, f.Ref
	}
	return texts, refs
}

// writeBack sets the texts the checks changed, each in its own place in the body.
func writeBack(req *stage.Request, gr *Request, orig []string, refs []openai.TextRef) error {
	for i, t := range gr.Texts {
		if t.Text != orig[i] {
			if err := req.Body.SetText(refs[i], t.Text); err != nil {
				return fmt.Errorf("write back redacted text: %w", err)
			}
		}
	}
	return nil
}

// NewStream implements stage.ChunkFilter.
func (s *Stage) NewStream(ctx context.Context, req *stage.Request) stage.StreamFilter {
	pols := s.policiesFor(req)
	if len(pols) == 0 || len(pols[0].Response) == 0 {
		return nil
	}
	g := NewStreamGuard(ctx, s.Metrics, Audit{Tenant: req.Tenant, Pool: poolLabel(req)}, pols[0].Response...)
	return &streamFilter{g: g, req: req}
}

// streamFilter marks the request once the response guard acted.
type streamFilter struct {
	g      *StreamGuard
	req    *stage.Request
	marked bool
}

func (f *streamFilter) mark() {
	if !f.marked && f.g.Acted() {
		f.marked = true
		f.req.Flags = append(f.req.Flags, FlagResponseActed)
	}
}

func (f *streamFilter) Write(choice int, text string) (string, error) {
	out, err := f.g.Write(choice, text)
	f.mark()
	return out, err
}

func (f *streamFilter) Close(choice int) (string, error) {
	out, err := f.g.Close(choice)
	f.mark()
	return out, err
}

func (f *streamFilter) Blocked() (string, bool) { return f.g.Blocked() }
