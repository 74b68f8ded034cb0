package guard

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/guard/pii"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// Default timeouts of a check when the policy sets none.
const (
	DefaultBuiltinTimeout = 250 * time.Millisecond
	DefaultRemoteTimeout  = 500 * time.Millisecond
)

// Policy is a compiled GuardrailPolicy.
type Policy struct {
	// Name is "namespace/name" of the GuardrailPolicy.
	Name string
	// Request is the chain run on requests.
	Request *Chain
	// Response are the checks run on streamed responses.
	Response []ResponseCheck
}

// CompileOptions are what compiling a policy needs besides the spec.
type CompileOptions struct {
	// Metrics records the checks (may be nil).
	Metrics *Metrics
	// Secret returns a key of a Secret in the policy's namespace (for webhook authorization).
	Secret func(name, key string) (string, error)
	// Client makes remote calls; it must dial through Egress (NewClient). Default: NewClient(Egress).
	Client *http.Client
	// Egress is the admin's policy for user-chosen URLs: a presidio or webhook URL whose host
	// is an IP literal it denies fails to compile (names are checked when dialed).
	Egress *egress.Policy
}

// Compile builds a policy. Errors name the field, e.g. "spec.request[2].pattern.patterns[0]".
func Compile(name string, spec *nnv1.GuardrailPolicySpec, o CompileOptions) (*Policy, error) {
	if o.Client == nil {
		o.Client = NewClient(o.Egress)
	}
	p := &Policy{Name: name}
	var entries []Entry
	for i, c := range spec.Request {
		e, err := compileEntry(c, fmt.Sprintf("spec.request[%d]", i), "request", o)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	chain, err := NewChain(o.Metrics, entries...)
	if err != nil {
		return nil, fmt.Errorf("spec.request: %w", err)
	}
	p.Request = chain
	window := DefaultStreamWindow
	if spec.StreamWindowBytes != nil {
		window = int(*spec.StreamWindowBytes)
	}
	for i, c := range spec.Response {
		field := fmt.Sprintf("spec.response[%d]", i)
		rc := ResponseCheck{Name: c.Name, Type: string(c.Type), Action: actionOf(c.Action), Window: window}
		switch c.Type {
		case nnv1.GuardrailPII:
			d, err := piiDetector(c.PII, field+".pii")
			if err != nil {
				return nil, err
			}
			rc.Find = PIIFinder(d)
		case nnv1.GuardrailPattern:
			res, err := compilePatterns(c.Pattern, field+".pattern")
			if err != nil {
				return nil, err
			}
			rc.Find = PatternFinder(res)
		default:
			return nil, fmt.Errorf("%s.type: %q does not run on streamed responses (pii, pattern do)", field, c.Type)
		}
		p.Response = append(p.Response, rc)
	}
	return p, nil
}

func actionOf(a nnv1.GuardrailAction) Action {
	if a == "" {
		return Block
	}
	return Action(a)
}

func compileEntry(c nnv1.GuardrailCheck, field, direction string, o CompileOptions) (Entry, error) {
	e := Entry{Name: c.Name, Action: actionOf(c.Action), FailOpen: c.FailurePolicy == nnv1.FailOpen}
	if _, ok := ParseAction(string(e.Action)); !ok || e.Action == Allow {
		return e, fmt.Errorf("%s.action: %q is not one of block, redact, flag", field, c.Action)
	}
	remote := c.Type == nnv1.GuardrailPresidio || c.Type == nnv1.GuardrailWebhook
	e.Timeout = DefaultBuiltinTimeout
	if remote {
		e.Timeout = DefaultRemoteTimeout
	}
	if c.Timeout != "" {
		d, err := c.Timeout.Parse()
		if err != nil {
			return e, fmt.Errorf("%s.timeout: %w", field, err)
		}
		e.Timeout = d
	}
	switch c.Type {
	case nnv1.GuardrailPII:
		d, err := piiDetector(c.PII, field+".pii")
		if err != nil {
			return e, err
		}
		e.Plugin = PIIPlugin{Detector: d}
	case nnv1.GuardrailJailbreak:
		th := 0.0
		if c.Jailbreak != nil && c.Jailbreak.Threshold != "" {
			v, err := c.Jailbreak.Threshold.Float64()
			if err != nil || v <= 0 || v > 1 {
				return e, fmt.Errorf("%s.jailbreak.threshold: %q must be in (0, 1]", field, c.Jailbreak.Threshold)
			}
			th = v
		}
		e.Plugin = JailbreakPlugin{Threshold: th}
	case nnv1.GuardrailPattern:
		res, err := compilePatterns(c.Pattern, field+".pattern")
		if err != nil {
			return e, err
		}
		e.Plugin = PatternPlugin{Patterns: res}
	case nnv1.GuardrailHeader:
		hp, err := compileHeaders(c.Header, field+".header")
		if err != nil {
			return e, err
		}
		e.Plugin = hp
	case nnv1.GuardrailPresidio:
		if c.Presidio == nil {
			return e, fmt.Errorf("%s.presidio: required for type presidio", field)
		}
		ms, err := c.Presidio.MinScore.Float64()
		if err != nil {
			return e, fmt.Errorf("%s.presidio.minScore: %w", field, err)
		}
		if err := checkRemoteURL(c.Presidio.URL, o.Egress); err != nil {
			return e, fmt.Errorf("%s.presidio.url: %w", field, err)
		}
		e.Plugin = PresidioPlugin{URL: c.Presidio.URL, Language: c.Presidio.Language, Entities: c.Presidio.Entities, MinScore: ms, Client: o.Client}
	case nnv1.GuardrailWebhook:
		if c.Webhook == nil {
			return e, fmt.Errorf("%s.webhook: required for type webhook", field)
		}
		if err := checkRemoteURL(c.Webhook.URL, o.Egress); err != nil {
			return e, fmt.Errorf("%s.webhook.url: %w", field, err)
		}
		wp := WebhookPlugin{URL: c.Webhook.URL, Client: o.Client, Direction: direction}
		if ref := c.Webhook.AuthorizationSecretRef; ref != nil {
			if o.Secret == nil {
				return e, fmt.Errorf("%s.webhook.authorizationSecretRef: Secrets cannot be read in this mode", field)
			}
			v, err := o.Secret(ref.Name, "authorization")
			if err != nil {
				return e, fmt.Errorf("%s.webhook.authorizationSecretRef: %w", field, err)
			}
			wp.Header = http.Header{"Authorization": {v}}
		}
		e.Plugin = wp
	default:
		return e, fmt.Errorf("%s.type: unknown type %q", field, c.Type)
	}
	return e, nil
}

func piiDetector(c *nnv1.PIICheck, field string) (*pii.Detector, error) {
	o := pii.Options{MinScore: 0.5}
	if c == nil {
		return pii.New(o), nil
	}
	for i, name := range c.Entities {
		e, ok := pii.ParseEntity(name)
		if !ok {
			return nil, fmt.Errorf("%s.entities[%d]: unknown entity %q", field, i, name)
		}
		o.Entities = append(o.Entities, e)
	}
	if c.MinScore != "" {
		v, err := c.MinScore.Float64()
		if err != nil || v < 0 || v > 1 {
			return nil, fmt.Errorf("%s.minScore: %q must be in [0, 1]", field, c.MinScore)
		}
		o.MinScore = v
	}
	return pii.New(o), nil
}

func compilePatterns(c *nnv1.PatternCheck, field string) ([]*regexp.Regexp, error) {
	if c == nil || len(c.Patterns) == 0 {
		return nil, fmt.Errorf("%s.patterns: at least one pattern is required", field)
	}
	var out []*regexp.Regexp
	for i, p := range c.Patterns {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("%s.patterns[%d]: %w", field, i, err)
		}
		out = append(out, re)
	}
	return out, nil
}

func compileHeaders(c *nnv1.HeaderCheck, field string) (HeaderPlugin, error) {
	var hp HeaderPlugin
	if c == nil {
		return hp, fmt.Errorf("%s: required for type header", field)
	}
	for i, d := range c.Deny {
		r := HeaderRule{Name: d.Name}
		if d.Pattern != "" {
			re, err := regexp.Compile(d.Pattern)
			if err != nil {
				return hp, fmt.Errorf("%s.deny[%d].pattern: %w", field, i, err)
			}
			r.Pattern = re
		}
		hp.Rules = append(hp.Rules, r)
	}
	for _, n := range c.Require {
		hp.Rules = append(hp.Rules, HeaderRule{Name: n, Require: true})
	}
	return hp, nil
}

// checkRemoteURL wants an http(s) URL whose host, when an IP literal, p admits.
func checkRemoteURL(raw string, p *egress.Policy) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want an http(s) URL", raw)
	}
	return p.CheckURLHost(u.Hostname())
}
