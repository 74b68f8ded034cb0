package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// maxRemoteResponse bounds what a remote check may answer.
const maxRemoteResponse = 1 << 20

// remoteTimeout bounds one remote call besides the chain's own per-check timeout.
const remoteTimeout = 10 * time.Second

// NewClient returns the client remote checks use: dials through p (user-chosen URLs reach no
// loopback, link-local, private or cluster address unless p admits it), follows no redirects,
// and bounds each call.
func NewClient(p *egress.Policy) *http.Client {
	return p.Client(egress.ClientOptions{Timeout: remoteTimeout})
}

// defaultClient is used when a plugin has no Client: the zero egress policy (public addresses only).
var defaultClient = NewClient(nil)

// PresidioPlugin calls a Presidio-compatible analyzer (POST <URL>/analyze) once per text.
// Presidio reports code-point offsets; they are converted to byte offsets.
type PresidioPlugin struct {
	// URL is the analyzer's base URL (e.g. http://presidio-analyzer:3000).
	URL string
	// Language is sent as "language" (default "en").
	Language string
	// Entities, when set, limits the entity types the analyzer reports.
	Entities []string
	// MinScore is sent as score_threshold.
	MinScore float64
	// Client makes the calls (default: NewClient of the zero egress policy); the chain's timeout
	// bounds each.
	Client *http.Client
}

// GetType implements GuardrailPlugin.
func (PresidioPlugin) GetType() string { return "presidio" }

// AnalyzeRequest is Presidio's /analyze request body.
type AnalyzeRequest struct {
	Text           string   `json:"text"`
	Language       string   `json:"language"`
	Entities       []string `json:"entities,omitempty"`
	ScoreThreshold float64  `json:"score_threshold,omitempty"`
}

// AnalyzeResult is one item of Presidio's /analyze response; Start and End count code points.
type AnalyzeResult struct {
	EntityType string  `json:"entity_type"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	Score      float64 `json:"score"`
}

// Check implements GuardrailPlugin.
func (p PresidioPlugin) Check(ctx context.Context, req *Request) (*GuardrailResult, error) {
	lang := p.Language
	if lang == "" {
		lang = "en"
	}
	var spans []Span
	for i, t := range req.Texts {
		if t.Text == "" {
			continue
		}
		var res []AnalyzeResult
		body := AnalyzeRequest{Text: t.Text, Language: lang, Entities: p.Entities, ScoreThreshold: p.MinScore}
		if err := postJSON(ctx, p.Client, strings.TrimRight(p.URL, "/")+"/analyze", body, &res); err != nil {
			return nil, fmt.Errorf("presidio analyze: %w", err)
		}
		idx := runeToByte(t.Text)
		for _, r := range res {
			if r.Start < 0 || r.End > len(idx)-1 || r.Start >= r.End || r.Score < p.MinScore {
				continue
			}
			spans = append(spans, Span{Text: i, Start: idx[r.Start], End: idx[r.End], Type: r.EntityType, Score: r.Score})
		}
	}
	return &GuardrailResult{Detected: len(spans) > 0, Spans: spans, Reason: reasonOf(spans)}, nil
}

// runeToByte maps code-point offsets 0..n to byte offsets.
func runeToByte(s string) []int {
	idx := make([]int, 0, utf8.RuneCountInString(s)+1)
	for i := range s {
		idx = append(idx, i)
	}
	return append(idx, len(s))
}

// WebhookPlugin calls a generic policy webhook: POST URL with a WebhookRequest; the answer is a
// WebhookResponse. Llama Guard or NeMo Guardrails behind a small adapter fit this shape.
type WebhookPlugin struct {
	// URL receives the POST.
	URL string
	// Header is added to every call (e.g. Authorization).
	Header http.Header
	// Client makes the calls (default: NewClient of the zero egress policy).
	Client *http.Client
	// Direction is sent as "direction" ("request" or "response").
	Direction string
}

// WebhookText is one text sent to a webhook.
type WebhookText struct {
	Role string `json:"role"`
	Text string `json:"text"`
}

// WebhookRequest is the body a webhook receives.
type WebhookRequest struct {
	Direction string        `json:"direction"`
	Tenant    string        `json:"tenant,omitempty"`
	Pool      string        `json:"pool,omitempty"`
	Model     string        `json:"model,omitempty"`
	Texts     []WebhookText `json:"texts"`
}

// WebhookSpan is a span a webhook reports; Start and End count code points of Texts[Text].
type WebhookSpan struct {
	Text  int     `json:"text"`
	Start int     `json:"start"`
	End   int     `json:"end"`
	Type  string  `json:"type"`
	Score float64 `json:"score,omitempty"`
}

// WebhookResponse is a webhook's answer. Action "allow" (or empty with no spans) passes;
// "block", "redact" and "flag" are verdicts; spans make a redaction possible.
type WebhookResponse struct {
	Action string        `json:"action"`
	Reason string        `json:"reason,omitempty"`
	Spans  []WebhookSpan `json:"spans,omitempty"`
}

// GetType implements GuardrailPlugin.
func (WebhookPlugin) GetType() string { return "webhook" }

// Check implements GuardrailPlugin.
func (p WebhookPlugin) Check(ctx context.Context, req *Request) (*GuardrailResult, error) {
	dir := p.Direction
	if dir == "" {
		dir = "request"
	}
	in := WebhookRequest{Direction: dir, Tenant: req.Tenant, Pool: req.Pool, Model: req.Model}
	for _, t := range req.Texts {
		in.Texts = append(in.Texts, WebhookText{Role: t.Role, Text: t.Text})
	}
	var out WebhookResponse
	if err := postJSONHeader(ctx, p.Client, p.URL, p.Header, in, &out); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	res := &GuardrailResult{Reason: out.Reason}
	if out.Action != "" {
		a, ok := ParseAction(out.Action)
		if !ok {
			return nil, fmt.Errorf("webhook: unknown action %q (want allow, block, redact or flag)", out.Action)
		}
		if a != Allow {
			res.Detected, res.Action = true, a
		}
	}
	for _, s := range out.Spans {
		if s.Text < 0 || s.Text >= len(req.Texts) {
			return nil, fmt.Errorf("webhook: span text index %d out of range", s.Text)
		}
		idx := runeToByte(req.Texts[s.Text].Text)
		if s.Start < 0 || s.End > len(idx)-1 || s.Start >= s.End {
			return nil, fmt.Errorf("webhook: span [%d,%d) out of range", s.Start, s.End)
		}
		res.Spans = append(res.Spans, Span{Text: s.Text, Start: idx[s.Start], End: idx[s.End], Type: s.Type, Score: s.Score})
		res.Detected = true
	}
	if res.Reason == "" {
		res.Reason = reasonOf(res.Spans)
	}
	return res, nil
}

func postJSON(ctx context.Context, c *http.Client, url string, in, out any) error {
	return postJSONHeader(ctx, c, url, nil, in, out)
}

func postJSONHeader(ctx context.Context, c *http.Client, url string, h http.Header, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRemoteResponse))
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}
