package guard

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

// DefaultStreamWindow is the default hold-back of a response check in bytes: longer than any
// value the built-in detector finds short of private keys (an e-mail of up to 254 bytes is the
// exception the window trades away) and about 32 tokens of English.
const DefaultStreamWindow = 128

// Finder returns the findings in a text (sorted, non-overlapping).
type Finder func(text string) []pii.Finding

// PIIFinder returns a Finder over the built-in detector.
func PIIFinder(d *pii.Detector) Finder { return d.Detect }

// PatternFinder returns a Finder over deny-list expressions; matches have entity "PATTERN".
func PatternFinder(res []*regexp.Regexp) Finder {
	return func(text string) []pii.Finding {
		var fs []pii.Finding
		for _, re := range res {
			for _, loc := range re.FindAllStringIndex(text, -1) {
				if loc[1] > loc[0] {
					fs = append(fs, pii.Finding{Entity: "PATTERN", Start: loc[0], End: loc[1], Score: 1})
				}
			}
		}
		return dropOverlaps(fs)
	}
}

func dropOverlaps(fs []pii.Finding) []pii.Finding {
	if len(fs) < 2 {
		return fs
	}
	sortFindings(fs)
	kept := fs[:1]
	for _, f := range fs[1:] {
		if f.Start >= kept[len(kept)-1].End {
			kept = append(kept, f)
		}
	}
	return kept
}

func sortFindings(fs []pii.Finding) {
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].Start < fs[j-1].Start; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
}

// ResponseCheck is one check over streamed response text.
type ResponseCheck struct {
	// Name and Type identify the check in audit lines and metrics.
	Name, Type string
	// Find detects values.
	Find Finder
	// Action on a detection: Redact replaces values, Block ends the stream, Flag records.
	Action Action
	// Window is the most bytes held back (default DefaultStreamWindow).
	Window int
}

// StreamGuard applies response checks to one response's text, choice by choice. It holds back
// at most Window bytes per check (plus the rest of a value that straddles the cut, itself
// bounded by Window): a value split across chunks is found whole and redacted before any of it
// is sent. A private-key block is cut at its BEGIN line and everything up to its END line is
// dropped, however long.
type StreamGuard struct {
	checks  []ResponseCheck
	metrics *Metrics
	audit   Audit
	ctx     context.Context
	states  map[int][]*streamState
	blocked string
	counted map[string]bool
	// amu guards lengths, which the request's goroutine adds to and auditLines, also run when
	// ctx ends, drains.
	amu     sync.Mutex
	lengths map[string][]int
}

type streamState struct {
	held       string
	suppressed bool   // inside a private-key block
	endMarker  string // the END line that ends it
}

// NewStreamGuard returns a guard for one response. Its audit lines are written when the last
// choice closes, when a check blocks, and otherwise when ctx ends (a response the client
// cancelled or the gateway abandoned), so every action taken is audited once.
func NewStreamGuard(ctx context.Context, m *Metrics, a Audit, checks ...ResponseCheck) *StreamGuard {
	a.Direction = "response"
	g := &StreamGuard{checks: checks, metrics: m, audit: a, ctx: ctx, states: map[int][]*streamState{},
		counted: map[string]bool{}, lengths: map[string][]int{}}
	context.AfterFunc(ctx, func() { g.auditLines("cancelled") })
	return g
}

func (g *StreamGuard) state(choice int) []*streamState {
	st, ok := g.states[choice]
	if !ok {
		st = make([]*streamState, len(g.checks))
		for i := range st {
			st[i] = &streamState{}
		}
		g.states[choice] = st
	}
	return st
}

// Write takes the next text of a choice and returns what may be sent now.
func (g *StreamGuard) Write(choice int, text string) (string, error) {
	if g.blocked != "" {
		return "", nil
	}
	st := g.state(choice)
	for i, c := range g.checks {
		text = g.step(c, st[i], text, false)
		if g.blocked != "" {
			return "", nil
		}
	}
	return text, nil
}

// Close ends a choice and returns the rest of its text.
func (g *StreamGuard) Close(choice int) (string, error) {
	if g.blocked != "" {
		return "", nil
	}
	st := g.state(choice)
	text := ""
	for i, c := range g.checks {
		text = g.step(c, st[i], text, true)
		if g.blocked != "" {
			return "", nil
		}
	}
	delete(g.states, choice)
	if len(g.states) == 0 {
		g.auditLines("complete")
	}
	return text, nil
}

// Acted reports whether any check detected something in the response so far.
func (g *StreamGuard) Acted() bool { return len(g.counted) > 0 }

// Blocked reports the reason when a Block check ended the response.
func (g *StreamGuard) Blocked() (string, bool) { return g.blocked, g.blocked != "" }

// step feeds text to one check and returns the text it lets through.
func (g *StreamGuard) step(c ResponseCheck, st *streamState, text string, final bool) string {
	var out strings.Builder
	st.held += text
	for {
		if st.suppressed {
			k := strings.Index(st.held, st.endMarker)
			if k < 0 {
				// Keep only what could be the start of the END line.
				if keep := len(st.endMarker) - 1; len(st.held) > keep {
					st.held = st.held[len(st.held)-keep:]
				}
				if final {
					st.held = ""
				}
				return out.String()
			}
			st.held, st.suppressed = st.held[k+len(st.endMarker):], false
			continue
		}
		emitted, again := g.emit(c, st, final)
		out.WriteString(emitted)
		if !again {
			return out.String()
		}
	}
}

// emit sends what of st.held is safe and reports whether a private-key block began (then the
// caller continues in suppressed mode).
func (g *StreamGuard) emit(c ResponseCheck, st *streamState, final bool) (string, bool) {
	w := c.Window
	if w <= 0 {
		w = DefaultStreamWindow
	}
	fs := c.Find(st.held)
	cut := len(st.held)
	if !final {
		cut = max(0, len(st.held)-w)
	}
	for _, f := range fs {
		if f.Entity == pii.PrivateKey && f.End == len(st.held) && !final && c.Action != Flag {
			// An unterminated key block: send up to it, then drop until its END line.
			sent := g.act(c, st.held[:f.Start], fs, f.Start) + g.placeholder(c, f)
			label := strings.TrimSuffix(strings.TrimPrefix(firstLine(st.held[f.Start:]), "-----BEGIN "), "-----")
			st.held, st.suppressed, st.endMarker = st.held[f.Start:], true, "-----END "+label+"-----"
			return sent, true
		}
		if f.Start < cut && f.End > cut {
			if len(st.held)-f.Start <= 2*w {
				cut = f.Start // hold the whole value back
			} else {
				cut = f.End // longer than the window allows: settle it now
			}
		}
	}
	for cut > 0 && cut < len(st.held) && !utf8.RuneStart(st.held[cut]) {
		cut--
	}
	sent := g.act(c, st.held[:cut], fs, cut)
	st.held = st.held[cut:]
	return sent, false
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return strings.TrimSpace(s)
}

// act applies the check's action to text (the first cut bytes of held) given findings fs.
func (g *StreamGuard) act(c ResponseCheck, text string, fs []pii.Finding, cut int) string {
	var in []pii.Finding
	for _, f := range fs {
		if f.End <= cut {
			in = append(in, f)
		}
	}
	if len(in) == 0 {
		return text
	}
	for _, f := range in {
		g.note(c, f)
	}
	switch c.Action {
	case Block:
		g.block("response blocked by guardrail " + c.Name + " (" + string(in[0].Entity) + ")")
		return ""
	case Redact:
		return pii.Redact(text, in)
	}
	return text
}

func (g *StreamGuard) placeholder(c ResponseCheck, f pii.Finding) string {
	g.note(c, f)
	switch c.Action {
	case Block:
		g.block("response blocked by guardrail " + c.Name + " (" + string(f.Entity) + ")")
		return ""
	case Redact:
		return pii.Placeholder(f.Entity)
	}
	return ""
}

// note counts a check's action once per response and remembers span lengths for the audit.
func (g *StreamGuard) note(c ResponseCheck, f pii.Finding) {
	if !g.counted[c.Name] {
		g.counted[c.Name] = true
		g.metrics.countStream(c.Type, c.Action)
	}
	g.amu.Lock()
	g.lengths[c.Name] = append(g.lengths[c.Name], f.End-f.Start)
	g.amu.Unlock()
}

// block ends the response and audits what was found so far.
func (g *StreamGuard) block(reason string) {
	g.blocked = reason
	g.auditLines("blocked")
}

// auditLines writes one line per check that acted and has not been audited yet; end says how the
// response ended ("complete", "blocked", "cancelled").
func (g *StreamGuard) auditLines(end string) {
	g.amu.Lock()
	defer g.amu.Unlock()
	for _, c := range g.checks {
		if ls := g.lengths[c.Name]; len(ls) > 0 {
			klog.FromContext(g.ctx).Info("guardrail decision", "direction", g.audit.Direction, "tenant", g.audit.Tenant,
				"pool", g.audit.Pool, "guardrail", c.Name, "type", c.Type, "action", string(c.Action), "spanLengths", ls,
				"end", end)
			delete(g.lengths, c.Name)
		}
	}
}
