package guard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

// Entry is one check of a chain with its policy.
type Entry struct {
	// Name identifies the entry in audit lines (unique within a chain).
	Name string
	// Plugin runs the check.
	Plugin GuardrailPlugin
	// Action applies when the plugin detects something (a plugin's own Action overrides it).
	Action Action
	// Timeout bounds the check; 0 means no timeout of its own.
	Timeout time.Duration
	// FailOpen passes the request when the check errs or times out; otherwise it is blocked.
	FailOpen bool
}

// Chain runs entries in order. The zero value allows everything.
type Chain struct {
	entries []Entry
	metrics *Metrics
}

// NewChain returns a chain of entries; metrics may be nil.
func NewChain(m *Metrics, entries ...Entry) (*Chain, error) {
	seen := map[string]bool{}
	for i, e := range entries {
		if e.Name == "" || e.Plugin == nil {
			return nil, fmt.Errorf("guardrail entry %d: name and plugin are required", i)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("guardrail entry %d: duplicate name %q", i, e.Name)
		}
		seen[e.Name] = true
		if e.Action.rank() == 0 {
			return nil, fmt.Errorf("guardrail %q: action %q is not one of block, redact, flag", e.Name, e.Action)
		}
	}
	return &Chain{entries: entries, metrics: m}, nil
}

// Len is the number of entries.
func (c *Chain) Len() int {
	if c == nil {
		return 0
	}
	return len(c.entries)
}

// CheckOutcome is what one entry did to one request.
type CheckOutcome struct {
	// Name and Type of the entry.
	Name, Type string
	// Action taken: allow when nothing was detected.
	Action Action
	// Reason of the detection, or of the failure.
	Reason string
	// Err is set when the check failed (timeout included); FailedOpen tells which way.
	Err        error
	FailedOpen bool
	// SpanLengths are the byte lengths of the detected spans (never the text).
	SpanLengths []int
	// Duration of the check.
	Duration time.Duration
}

// Decision is the chain's verdict on one request.
type Decision struct {
	// Action is the strictest action any entry took.
	Action Action
	// Reason is the reason of the entry that set Action (text-free).
	Reason string
	// By names that entry.
	By string
	// Checks holds one outcome per entry that ran, in order.
	Checks []CheckOutcome
}

// Audit describes the request for audit lines and metrics.
type Audit struct {
	// Direction is "request" or "response".
	Direction string
	Tenant    string
	Pool      string
}

// Run checks req with every entry in order. Redactions change req.Texts so later entries see the
// redacted text; a block stops the chain. Run itself never fails: errors become allow or block
// by each entry's failure policy.
func (c *Chain) Run(ctx context.Context, req *Request, a Audit) Decision {
	d := Decision{Action: Allow}
	if c == nil {
		return d
	}
	for _, e := range c.entries {
		o := c.runOne(ctx, e, req)
		d.Checks = append(d.Checks, o)
		c.record(ctx, e, o, a)
		if o.Action.rank() > d.Action.rank() {
			d.Action, d.Reason, d.By = o.Action, o.Reason, e.Name
		}
		if o.Action == Block {
			break
		}
	}
	return d
}

func (c *Chain) runOne(ctx context.Context, e Entry, req *Request) CheckOutcome {
	o := CheckOutcome{Name: e.Name, Type: e.Plugin.GetType(), Action: Allow}
	cctx := ctx
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	start := time.Now()
	res, err := e.Plugin.Check(cctx, req)
	if err == nil && cctx.Err() != nil {
		err = cctx.Err() // a plugin that ignored its deadline still timed out
	}
	o.Duration = time.Since(start)
	if err != nil {
		o.Err = err
		if errors.Is(err, context.DeadlineExceeded) {
			o.Reason = fmt.Sprintf("guardrail %s timed out after %s", e.Name, e.Timeout)
		} else {
			o.Reason = fmt.Sprintf("guardrail %s failed", e.Name)
		}
		if e.FailOpen {
			o.FailedOpen = true
		} else {
			o.Action = Block
		}
		return o
	}
	if res == nil || !res.Detected {
		return o
	}
	o.Action = e.Action
	if res.Action.rank() > 0 {
		o.Action = res.Action
	}
	o.Reason = res.Reason
	for _, s := range res.Spans {
		o.SpanLengths = append(o.SpanLengths, s.End-s.Start)
	}
	if o.Action == Redact {
		if len(res.Spans) == 0 {
			// Nothing to redact is a policy error; block rather than pass what was detected.
			o.Action, o.Reason = Block, res.Reason+" (no spans to redact)"
		} else {
			applyRedactions(req, res.Spans)
		}
	}
	return o
}

// applyRedactions replaces spans (possibly from several texts, unsorted, overlapping) with
// "<TYPE>" placeholders.
func applyRedactions(req *Request, spans []Span) {
	byText := map[int][]Span{}
	for _, s := range spans {
		if s.Text >= 0 && s.Text < len(req.Texts) && s.Start >= 0 && s.End <= len(req.Texts[s.Text].Text) && s.Start < s.End {
			byText[s.Text] = append(byText[s.Text], s)
		}
	}
	for i, ss := range byText {
		sort.Slice(ss, func(a, b int) bool { return ss[a].Start < ss[b].Start })
		fs := make([]pii.Finding, 0, len(ss))
		last := 0
		for _, s := range ss {
			if s.Start < last {
				continue
			}
			fs = append(fs, pii.Finding{Entity: pii.Entity(s.Type), Start: s.Start, End: s.End})
			last = s.End
		}
		req.Texts[i].Text = pii.Redact(req.Texts[i].Text, fs)
	}
}

func (c *Chain) record(ctx context.Context, e Entry, o CheckOutcome, a Audit) {
	c.metrics.observe(o)
	if o.Action == Allow && o.Err == nil {
		return
	}
	log := klog.FromContext(ctx)
	kv := []any{"direction", a.Direction, "tenant", a.Tenant, "pool", a.Pool, "guardrail", e.Name,
		"type", o.Type, "action", string(o.Action), "reason", o.Reason, "spanLengths", o.SpanLengths}
	if o.Err != nil {
		log.Info("guardrail check failed", append(kv, "failOpen", o.FailedOpen, "err", o.Err.Error())...)
		return
	}
	log.Info("guardrail decision", kv...)
}

// reasonOf joins the distinct span types of spans, sorted: a text-free reason.
func reasonOf(spans []Span) string {
	seen := map[string]bool{}
	var ts []string
	for _, s := range spans {
		if !seen[s.Type] {
			seen[s.Type] = true
			ts = append(ts, s.Type)
		}
	}
	sort.Strings(ts)
	return strings.Join(ts, ",")
}
