package main

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
	m    *agentMetrics
}

func newSidecarClient(base string, m *agentMetrics) *sidecarClient {
	return &sidecarClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Timeout: 500 * time.Millisecond}, m: m}
}

func (c *sidecarClient) observe(tool string, start time.Time, err error) {
	c.m.toolLatency.WithLabelValues(tool).Observe(time.Since(start).Seconds())
	if err != nil {
		c.m.sessionErrors.Inc()
	}
}

// contextTokens returns the approximate token count of the stored conversation.
func (c *sidecarClient) contextTokens(ctx context.Context, conv string) (n int) {
	start := time.Now()
	var err error
	defer func() { c.observe("session-get", start, err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sessions/"+url.PathEscape(conv), nil)
	if err != nil {
		return 0
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	if resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("sidecar GET session: %s", resp.Status)
		return 0
	}
	var body struct {
		Turns []chatMessage `json:"turns"`
	}
	if err = json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0
	}
	for _, t := range body.Turns {
		n += countWords(t.Content)
	}
	return n
}

// appendTurn stores one turn of the conversation.
func (c *sidecarClient) appendTurn(ctx context.Context, conv, role, content string) {
	start := time.Now()
	var err error
	defer func() { c.observe("session-append", start, err) }()
	b, _ := json.Marshal(chatMessage{Role: role, Content: content})
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
