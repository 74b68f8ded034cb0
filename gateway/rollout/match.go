package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// Matcher decides whether a request takes part in a rollout: every set condition must hold.
type Matcher struct {
	headers    []nnv1.HeaderValuesMatch
	tenants    map[string]bool
	classifier *Classifier
}

// Classifier is the prompt-classifier hook: POST {"text": prompt} to URL, answer
// {"label": "..."}; the request takes part when the label is one of Labels.
type Classifier struct {
	URL     string
	Labels  map[string]bool
	Timeout time.Duration
	// Client makes the calls; it must dial through the egress policy (NewClassifierClient).
	// Default: NewClassifierClient of the zero policy (public addresses only).
	Client *http.Client
}

// NewClassifierClient returns the client classifier calls use: dials through p (the URL is
// user-chosen, so no loopback, link-local, private or cluster address unless p admits it),
// follows no redirects; each call is bounded by its Timeout.
func NewClassifierClient(p *egress.Policy) *http.Client {
	return p.Client(egress.ClientOptions{Timeout: 5 * time.Second})
}

var defaultClassifierClient = NewClassifierClient(nil)

// DefaultClassifierTimeout bounds a classifier call when the rollout sets none.
const DefaultClassifierTimeout = 100 * time.Millisecond

// NewMatcher builds the matcher of a rollout in namespace; nil match matches everything.
func NewMatcher(namespace string, m *nnv1.RolloutMatch, client *http.Client) (*Matcher, error) {
	if m == nil {
		return nil, nil
	}
	out := &Matcher{headers: m.Headers}
	if len(m.Tenants) > 0 {
		out.tenants = map[string]bool{}
		for _, t := range m.Tenants {
			if !strings.Contains(t, "/") {
				t = namespace + "/" + t
			}
			out.tenants[t] = true
		}
	}
	if c := m.Classifier; c != nil {
		to, err := c.Timeout.Parse()
		if c.Timeout == "" {
			to, err = DefaultClassifierTimeout, nil
		}
		if err != nil {
			return nil, fmt.Errorf("spec.match.classifier.timeout: %w", err)
		}
		labels := map[string]bool{}
		for _, l := range c.Labels {
			labels[l] = true
		}
		out.classifier = &Classifier{URL: c.URL, Labels: labels, Timeout: to, Client: client}
	}
	return out, nil
}

// Matches reports whether the request takes part. prompt is called only when a classifier is
// set and the other conditions hold; a failed classifier call means "does not take part".
func (m *Matcher) Matches(ctx context.Context, tenant string, h http.Header, prompt func() string) bool {
	if m == nil {
		return true
	}
	for _, hm := range m.headers {
		vals := h.Values(hm.Name)
		if len(vals) == 0 {
			return false
		}
		if len(hm.Values) > 0 && !anyIn(vals, hm.Values) {
			return false
		}
	}
	if m.tenants != nil && !m.tenants[tenant] {
		return false
	}
	if m.classifier != nil {
		label, err := m.classifier.Classify(ctx, prompt())
		return err == nil && m.classifier.Labels[label]
	}
	return true
}

// MatchesStatic is Matches without the classifier (for attributing requests that were blocked
// before routing, where no call may be made).
func (m *Matcher) MatchesStatic(tenant string, h http.Header) bool {
	if m == nil {
		return true
	}
	c := *m
	c.classifier = nil
	return c.Matches(context.Background(), tenant, h, nil)
}

func anyIn(vals, want []string) bool {
	for _, v := range vals {
		for _, w := range want {
			if v == w {
				return true
			}
		}
	}
	return false
}

// Classify calls the classifier.
func (c *Classifier) Classify(ctx context.Context, text string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	b, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	cl := c.Client
	if cl == nil {
		cl = defaultClassifierClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		return "", fmt.Errorf("classifier: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("classifier: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("classifier: HTTP %d", resp.StatusCode)
	}
	var out struct {
		Label string `json:"label"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return "", fmt.Errorf("classifier: decode: %w", err)
	}
	return out.Label, nil
}
