package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/store"
)

// TTLHeader is the request header that sets a per-entry TTL (same syntax as ?ttl=).
const TTLHeader = "X-Neuronetes-TTL"

// errTooLarge marks a request body over the size limit (-> 413).
var errTooLarge = errors.New("request body too large")

// errBadRequest marks malformed requests (-> 400).
var errBadRequest = errors.New("bad request")

// sessionRequest is a decoded session API request.
type sessionRequest struct {
	id        string
	ifVersion int64         // -1: unconditional
	ttl       time.Duration // 0: store default
	body      []byte        // PUT: session object; POST turns: one turn object
}

// decodeSession validates and decodes a session request: the conversation id
// from the path, If-Match, the TTL (query ?ttl= or X-Neuronetes-TTL: a Go
// duration like "90s" or whole seconds) and, for PUT/POST, a body of at most
// maxBody bytes (whose JSON the store validates).
func decodeSession(r *http.Request, maxBody int) (*sessionRequest, error) {
	var ttl string
	if r.URL.RawQuery != "" { // parsing an absent query still allocates
		ttl = r.URL.Query().Get("ttl")
	}
	req, err := decodeSessionHead(r.PathValue("id"), r.Header.Get("If-Match"), ttl, r.Header.Get(TTLHeader))
	if err != nil {
		return nil, err
	}
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		return req, nil
	}
	body, err := readBody(r, maxBody)
	if err != nil {
		return nil, err
	}
	// The JSON itself is validated once, by the store (store.ErrBadDocument -> 400).
	req.body = body
	return req, nil
}

// decodeSessionHead validates what every session request carries before
// its body: the id, If-Match, and the TTL from the query (queryTTL, which
// wins) or the header. Both HTTP servers share it.
func decodeSessionHead(id, ifMatch, queryTTL, headerTTL string) (*sessionRequest, error) {
	req := &sessionRequest{id: id, ifVersion: -1}
	if !store.ValidID(req.id) {
		return nil, fmt.Errorf("conversation id %q: want [A-Za-z0-9._-]{1,128}: %w", req.id, errBadRequest)
	}
	if im := strings.TrimSpace(ifMatch); im != "" {
		v, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(im, "W/"), `"`), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("If-Match %q: want a version number: %w", im, errBadRequest)
		}
		req.ifVersion = v
	}
	ttl := queryTTL
	if ttl == "" {
		ttl = headerTTL
	}
	if ttl != "" {
		d, err := parseTTL(ttl)
		if err != nil {
			return nil, err
		}
		req.ttl = d
	}
	return req, nil
}

// checkBodySize applies readBody's limit to a body already in memory.
func checkBodySize(b []byte, limit int) error {
	if len(b) > limit {
		return fmt.Errorf("body %d bytes over %d: %w", len(b), limit, errTooLarge)
	}
	return nil
}

func parseTTL(s string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < 1<<32 {
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(s); err != nil || d <= 0 {
		return 0, fmt.Errorf("ttl %q: want seconds or a duration like 30m: %w", s, errBadRequest)
	}
	return d, nil
}

// readBody reads at most limit bytes; more is errTooLarge.
func readBody(r *http.Request, limit int) ([]byte, error) {
	if r.ContentLength > int64(limit) {
		return nil, fmt.Errorf("body %d bytes over %d: %w", r.ContentLength, limit, errTooLarge)
	}
	// Size the buffer from Content-Length (already bounded above) so a
	// session body is read without io.ReadAll's repeated grow-and-copy.
	buf := bytes.NewBuffer(make([]byte, 0, max(0, r.ContentLength)+bytes.MinRead))
	_, err := buf.ReadFrom(io.LimitReader(r.Body, int64(limit)+1))
	b := buf.Bytes()
	if err != nil {
		return nil, fmt.Errorf("read body: %v: %w", err, errBadRequest)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("body over %d bytes: %w", limit, errTooLarge)
	}
	return b, nil
}
