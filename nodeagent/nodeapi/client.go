package nodeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"

	"github.com/neuronetes/neuronetes/nodeagent/agent"
)

// Client calls a node agent over its unix socket.
type Client struct {
	http *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{http: &http.Client{Transport: tr}}
}

// EnsureWarm asks the agent to cache and warm the weights and waits for it.
func (c *Client) EnsureWarm(ctx context.Context, req EnsureWarmRequest) (agent.State, error) {
	var st agent.State
	body, err := json.Marshal(req)
	if err != nil {
		return st, err
	}
	err = c.do(ctx, http.MethodPost, "/v1/ensure-warm", body, &st)
	return st, err
}

// Status returns the agent's entries.
func (c *Client) Status(ctx context.Context) (StatusResponse, error) {
	var out StatusResponse
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://nodeagent"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("node api %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("node api %s %s: %s: %s", method, path, resp.Status, e.Error)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("node api %s %s: decode: %w", method, path, err)
	}
	return nil
}
