// Package gwclient calls the NeuroNetes gateway's OpenAI API as any client does: a bearer API
// key, the session key in X-Session-Id, and a non-streamed chat completion per message.
package gwclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/internal/retryafter"
)

// Response headers the gateway sets.
const (
	headerRequestID = "X-Request-Id"
	headerPod       = "X-Neuronetes-Pod"
	headerPool      = "X-Neuronetes-Pool"
	// headerTargetPool names the AgentPool a dispatcher call is for; the gateway accepts it
	// only with the dispatcher's token.
	headerTargetPool = "X-Neuronetes-Target-Pool"
)

// MaxResponseBytes bounds a response body read into memory.
const MaxResponseBytes = 16 << 20

// Client sends chat completions to the gateway.
type Client struct {
	// BaseURL of the gateway API, e.g. http://neuronetes-gateway.neuronetes-system:8080.
	BaseURL string
	// DispatchToken is the dispatcher's own credential (the gateway's --dispatcher-token-file):
	// with it each call names its pool and is served by that pool alone. Without it, APIKey (a
	// Tenant's key) is sent and the gateway routes by model in that Tenant's namespace (static
	// mode without Kubernetes).
	DispatchToken string
	// APIKey is sent as "Authorization: Bearer <key>" when set and DispatchToken is not.
	APIKey string
	// HTTP is the client (default: a pooled client without its own timeout; the context
	// bounds each call).
	HTTP *http.Client
}

// Response is a completed call.
type Response struct {
	// Body is the completion JSON.
	Body []byte
	// RequestID, Pod and Pool are the gateway's response headers.
	RequestID, Pod, Pool string
}

// StatusError is a non-200 answer of the gateway.
type StatusError struct {
	// Status is the HTTP status.
	Status int
	// Code and Message are the OpenAI error body's code and message.
	Code, Message string
	// RetryAfter is the Retry-After header (0 when absent).
	RetryAfter time.Duration
	// RequestID is the gateway's request id.
	RequestID string
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Code != "" {
		return fmt.Sprintf("gateway %d %s: %s", e.Status, e.Code, msg)
	}
	return fmt.Sprintf("gateway %d: %s", e.Status, msg)
}

// DefaultHTTP is the transport used when Client.HTTP is nil: enough idle connections per host
// for a dispatcher's in-flight messages.
var DefaultHTTP = &http.Client{Transport: &http.Transport{
	Proxy: http.ProxyFromEnvironment, MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024,
	IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 0,
}}

// Chat posts body (a chat completion request) for pool ("namespace/name", sent with the
// dispatcher's token only) with the session key and returns the completion.
func (c *Client) Chat(ctx context.Context, pool, sessionKey string, body []byte) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("gateway request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	switch {
	case c.DispatchToken != "":
		req.Header.Set("Authorization", "Bearer "+c.DispatchToken)
		if pool != "" {
			req.Header.Set(headerTargetPool, pool)
		}
	case c.APIKey != "":
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	if sessionKey != "" {
		req.Header.Set("X-Session-Id", sessionKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = DefaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gateway response (request %s): %w", resp.Header.Get(headerRequestID), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp, raw)
	}
	if len(raw) > MaxResponseBytes {
		return nil, fmt.Errorf("gateway response (request %s) over %d bytes", resp.Header.Get(headerRequestID), MaxResponseBytes)
	}
	if err := checkCompletion(raw); err != nil {
		return nil, fmt.Errorf("gateway response (request %s): %w", resp.Header.Get(headerRequestID), err)
	}
	return &Response{Body: raw, RequestID: resp.Header.Get(headerRequestID), Pod: resp.Header.Get(headerPod), Pool: resp.Header.Get(headerPool)}, nil
}

func statusError(resp *http.Response, raw []byte) *StatusError {
	e := &StatusError{Status: resp.StatusCode, RequestID: resp.Header.Get(headerRequestID)}
	var body struct {
		Error struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error.Message != "" {
		e.Message = body.Error.Message
		switch c := body.Error.Code.(type) {
		case string:
			e.Code = c
		case float64:
			e.Code = strconv.Itoa(int(c))
		}
		if e.Code == "" {
			e.Code = body.Error.Type
		}
	} else if len(raw) > 0 {
		e.Message = strings.TrimSpace(string(raw[:min(len(raw), 512)]))
	}
	e.RetryAfter = retryafter.From(resp.Header, time.Now())
	return e
}

// checkCompletion makes sure a 200 body is a whole completion (a backend that failed after the
// headers can leave a truncated body or an error object).
func checkCompletion(raw []byte) error {
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Error   *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("not a completion: %w", err)
	}
	if c.Error != nil {
		return fmt.Errorf("completion carries an error: %s", c.Error.Message)
	}
	if len(c.Choices) == 0 {
		return errors.New("completion without choices")
	}
	return nil
}
