package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// sidecarClient talks to the NeuroNetes sidecar's session API (GET /v1/sessions/{id},
// POST /v1/sessions/{id}/turns). Failures are counted and otherwise ignored: session memory is an
// optimisation, never a reason to fail a completion.
type sidecarClient struct {
	base string
	hc   *http.Client
	m    *metrics
}

func newSidecarClient(base string, m *metrics) *sidecarClient {
	return &sidecarClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Timeout: 500 * time.Millisecond}, m: m}
}

func (c *sidecarClient) observe(tool string, start time.Time, err error) {
	c.m.toolLatency.WithLabelValues(tool).Observe(time.Since(start).Seconds())
	if err != nil {
		c.m.sessionErrors.Inc()
	}
}

// turns returns the stored conversation (nil when there is none or the sidecar fails).
func (c *sidecarClient) turns(ctx context.Context, conv string) (out []message) {
	start := time.Now()
	var err error
	defer func() { c.observe("session-get", start, err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sessions/"+url.PathEscape(conv), nil)
	if err != nil {
		return nil
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("sidecar GET session: %s", resp.Status)
		return nil
	}
	var body struct {
		Turns []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"turns"`
	}
	if err = json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil
	}
	for _, t := range body.Turns {
		out = append(out, message{Role: t.Role, text: t.Content})
	}
	return out
}

// appendTurn stores one turn of the conversation.
func (c *sidecarClient) appendTurn(ctx context.Context, conv, role, content string) {
	start := time.Now()
	var err error
	defer func() { c.observe("session-append", start, err) }()
	b, _ := json.Marshal(map[string]string{"role": role, "content": content})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/sessions/"+url.PathEscape(conv)+"/turns", bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		err = fmt.Errorf("sidecar POST turn: %s", resp.Status)
	}
}
