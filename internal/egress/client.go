package egress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Default timeouts of clients built by this package.
const (
	DefaultDialTimeout           = 5 * time.Second
	DefaultTLSHandshakeTimeout   = 5 * time.Second
	DefaultResponseHeaderTimeout = 10 * time.Second
)

// ClientOptions shape a client built by Policy.Client.
type ClientOptions struct {
	// Timeout bounds a whole request, body included; 0 leaves it to the caller's context and
	// the stall timeout (large downloads).
	Timeout time.Duration
	// DialTimeout, TLSHandshakeTimeout and ResponseHeaderTimeout default to the Default* values.
	DialTimeout, TLSHandshakeTimeout, ResponseHeaderTimeout time.Duration
	// MaxRedirects is how many redirects are followed; 0 refuses every redirect with an error.
	// Each redirect's target is dialed through the policy like the first request.
	MaxRedirects int
	// TLSConfig is the transport's TLS configuration (nil: system roots).
	TLSConfig *tls.Config
}

// Transport returns an *http.Transport that dials through the policy, never through an
// environment proxy (the proxy would be the address checked), with o's timeouts.
func (p *Policy) Transport(o ClientOptions) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           p.Dialer(o.DialTimeout),
		TLSClientConfig:       o.TLSConfig,
		TLSHandshakeTimeout:   orDefault(o.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout),
		ResponseHeaderTimeout: orDefault(o.ResponseHeaderTimeout, DefaultResponseHeaderTimeout),
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		ForceAttemptHTTP2:     true,
	}
}

// Client returns an *http.Client that dials through the policy with o's timeouts and redirect cap.
func (p *Policy) Client(o ClientOptions) *http.Client {
	return &http.Client{Transport: p.Transport(o), Timeout: o.Timeout, CheckRedirect: p.CheckRedirect(o.MaxRedirects)}
}

// CheckRedirect returns an http.Client.CheckRedirect that follows at most max http(s) redirects
// and refuses a target whose host is a denied IP literal before connecting (a name is checked
// when dialed).
func (p *Policy) CheckRedirect(max int) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > max {
			if max == 0 {
				return fmt.Errorf("egress: redirect to %s refused: this client follows no redirects", req.URL.Redacted())
			}
			return fmt.Errorf("egress: redirect to %s refused: more than %d redirects", req.URL.Redacted(), max)
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return fmt.Errorf("egress: redirect to %s refused: scheme %q", req.URL.Redacted(), req.URL.Scheme)
		}
		if err := p.CheckURLHost(req.URL.Hostname()); err != nil {
			return fmt.Errorf("egress: redirect to %s: %w", req.URL.Redacted(), err)
		}
		return nil
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// ErrStalled is returned by a StallReader whose source sent nothing for its stall timeout.
var ErrStalled = errors.New("egress: the source sent no bytes within the stall timeout")

// StallReader returns rc closed and failing with ErrStalled when no Read returns data for d
// (d <= 0 returns rc unchanged). Closing the underlying body unblocks a Read stuck on the
// network.
func StallReader(rc io.ReadCloser, d time.Duration) io.ReadCloser {
	if d <= 0 {
		return rc
	}
	s := &stallReader{rc: rc, d: d}
	s.t = time.AfterFunc(d, s.stall)
	return s
}

type stallReader struct {
	rc      io.ReadCloser
	d       time.Duration
	t       *time.Timer
	mu      sync.Mutex
	stalled bool
}

func (s *stallReader) stall() {
	s.mu.Lock()
	s.stalled = true
	s.mu.Unlock()
	_ = s.rc.Close()
}

func (s *stallReader) Read(b []byte) (int, error) {
	n, err := s.rc.Read(b)
	s.mu.Lock()
	stalled := s.stalled
	s.mu.Unlock()
	if stalled {
		return n, ErrStalled
	}
	if n > 0 {
		s.t.Reset(s.d)
	}
	return n, err
}

func (s *stallReader) Close() error {
	s.t.Stop()
	return s.rc.Close()
}
