package guard

import (
	"context"
	"fmt"
	"net/http"
	"regexp"

	"github.com/neuronetes/neuronetes/gateway/guard/jailbreak"
	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

// PIIPlugin is the built-in PII and secret detector (package pii).
type PIIPlugin struct {
	// Detector finds the values; New(pii.Options{...}).
	Detector *pii.Detector
}

// GetType implements GuardrailPlugin.
func (PIIPlugin) GetType() string { return "pii" }

// Check implements GuardrailPlugin.
func (p PIIPlugin) Check(ctx context.Context, req *Request) (*GuardrailResult, error) {
	var spans []Span
	for i, t := range req.Texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, f := range p.Detector.Detect(t.Text) {
			spans = append(spans, Span{Text: i, Start: f.Start, End: f.End, Type: string(f.Entity), Score: f.Score})
		}
	}
	return &GuardrailResult{Detected: len(spans) > 0, Spans: spans, Reason: reasonOf(spans)}, nil
}

// JailbreakPlugin scores every text of a request with package jailbreak and detects at or
// above Threshold. Every role counts: the API caller writes the system and assistant messages
// and the tool-call arguments of the history as much as the user's.
type JailbreakPlugin struct {
	// Threshold is the detection score (default jailbreak.DefaultThreshold when 0).
	Threshold float64
}

// GetType implements GuardrailPlugin.
func (JailbreakPlugin) GetType() string { return "jailbreak" }

// Check implements GuardrailPlugin.
func (p JailbreakPlugin) Check(ctx context.Context, req *Request) (*GuardrailResult, error) {
	th := p.Threshold
	if th <= 0 {
		th = jailbreak.DefaultThreshold
	}
	best := 0.0
	for _, t := range req.Texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s := jailbreak.Score(t.Text).Score; s > best {
			best = s
		}
	}
	return &GuardrailResult{Detected: best >= th, Score: best, Reason: fmt.Sprintf("jailbreak score %.2f", best)}, nil
}

// PatternPlugin matches RE2 expressions (a deny list) in every text.
type PatternPlugin struct {
	// Patterns are compiled expressions; each match is a span of type "PATTERN".
	Patterns []*regexp.Regexp
}

// GetType implements GuardrailPlugin.
func (PatternPlugin) GetType() string { return "pattern" }

// Check implements GuardrailPlugin.
func (p PatternPlugin) Check(ctx context.Context, req *Request) (*GuardrailResult, error) {
	var spans []Span
	for i, t := range req.Texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, re := range p.Patterns {
			for _, loc := range re.FindAllStringIndex(t.Text, -1) {
				if loc[1] > loc[0] {
					spans = append(spans, Span{Text: i, Start: loc[0], End: loc[1], Type: "PATTERN", Score: 1})
				}
			}
		}
	}
	return &GuardrailResult{Detected: len(spans) > 0, Spans: spans, Reason: "PATTERN"}, nil
}

// HeaderRule denies a request whose header Name matches Pattern (nil Pattern: whose header is
// present at all), or, with Require, whose header Name is missing.
type HeaderRule struct {
	Name    string
	Pattern *regexp.Regexp
	Require bool
}

// HeaderPlugin checks request headers.
type HeaderPlugin struct {
	Rules []HeaderRule
}

// GetType implements GuardrailPlugin.
func (HeaderPlugin) GetType() string { return "header" }

// Check implements GuardrailPlugin.
func (p HeaderPlugin) Check(_ context.Context, req *Request) (*GuardrailResult, error) {
	h := req.Header
	if h == nil {
		h = http.Header{}
	}
	for _, r := range p.Rules {
		vals := h.Values(r.Name)
		switch {
		case r.Require && len(vals) == 0:
			return &GuardrailResult{Detected: true, Reason: "missing header " + http.CanonicalHeaderKey(r.Name)}, nil
		case r.Require:
			continue
		case r.Pattern == nil && len(vals) > 0:
			return &GuardrailResult{Detected: true, Reason: "denied header " + http.CanonicalHeaderKey(r.Name)}, nil
		}
		for _, v := range vals {
			if r.Pattern != nil && r.Pattern.MatchString(v) {
				return &GuardrailResult{Detected: true, Reason: "denied value of header " + http.CanonicalHeaderKey(r.Name)}, nil
			}
		}
	}
	return &GuardrailResult{}, nil
}
