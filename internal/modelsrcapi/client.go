package modelsrcapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout bounds one request of the Client.
const DefaultTimeout = 20 * time.Second

// Client asks the controller for a Model's source credentials.
type Client struct {
	// URL is the endpoint's base, https://host:port (Path is appended).
	URL string
	// TokenFile is the pod's projected ServiceAccount token for Audience, read on every request
	// (the kubelet rotates it).
	TokenFile string
	// CA returns the PEM bundle that signs the controller's serving certificate; it is asked again
	// whenever it may have changed (after a failed connection).
	CA func(context.Context) ([]byte, error)
	// Timeout bounds one request (default DefaultTimeout).
	Timeout time.Duration

	mu sync.Mutex
	ca []byte
	hc *http.Client
}

// Credentials asks for the credentials of the Model req names. A refusal is an *Error.
func (c *Client) Credentials(ctx context.Context, req Request) (Credentials, error) {
	tok, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return Credentials{}, fmt.Errorf("reading the node agent's token for %s: %w", Audience, err)
	}
	hc, err := c.client(ctx)
	if err != nil {
		return Credentials{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Credentials{}, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+Path, bytes.NewReader(body))
	if err != nil {
		return Credentials{}, fmt.Errorf("model source credentials endpoint %q: %w", c.URL, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := hc.Do(hreq)
	if err != nil {
		c.reset() // the CA may have been renewed
		return Credentials{}, fmt.Errorf("asking the controller (%s) for the source credentials: %w", c.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	if err != nil {
		return Credentials{}, fmt.Errorf("reading the controller's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, &e.Refusal) != nil || e.Reason == "" {
			e.Reason, e.Message = http.StatusText(resp.StatusCode), fmt.Sprintf("HTTP %d", resp.StatusCode)
		}
		return Credentials{}, e
	}
	var out Credentials
	if err := json.Unmarshal(data, &out); err != nil {
		return Credentials{}, fmt.Errorf("decoding the controller's answer: %w", err)
	}
	return out, nil
}

// client returns the HTTP client trusting the current CA.
func (c *Client) client(ctx context.Context) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hc != nil {
		return c.hc, nil
	}
	if c.CA == nil {
		return nil, errors.New("no CA for the controller's serving certificate")
	}
	ca, err := c.CA(ctx)
	if err != nil {
		return nil, fmt.Errorf("the CA of the controller's serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("the CA of the controller's serving certificate holds no PEM certificate")
	}
	c.ca = ca
	c.hc = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Transport: &http.Transport{
		TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 15 * time.Second,
		IdleConnTimeout:       90 * time.Second,
	}}
	return c.hc, nil
}

func (c *Client) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hc != nil {
		c.hc.CloseIdleConnections()
	}
	c.hc, c.ca = nil, nil
}
