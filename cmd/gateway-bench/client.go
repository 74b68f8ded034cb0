package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"time"
)

// newClient is the load generator's HTTP/1.1 client: one connection per concurrent stream.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:        nil,
		DialContext:  (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true, ResponseHeaderTimeout: 5 * time.Minute,
	}}
}

// streamResult is what one streamed completion measured.
type streamResult struct {
	ttft   time.Duration // from sending the request to the first content chunk
	chunks int           // content chunks received
	pod    string        // the X-Neuronetes-Pod response header: which backend served it
	id     string        // the X-Request-Id response header (the gateway's request id)
	err    error
}

var (
	contentKey = []byte(`"content":"`)
	textKey    = []byte(`"text":"`)
	dataPrefix = []byte("data: ")
	doneLine   = []byte("data: [DONE]")
	errorLine  = []byte(`data: {"error"`)
)

// isContent reports whether an SSE data line carries a non-empty token.
func isContent(line []byte) bool {
	for _, k := range [][]byte{contentKey, textKey} {
		if i := bytes.Index(line, k); i >= 0 && i+len(k) < len(line) && line[i+len(k)] != '"' {
			return true
		}
	}
	return false
}

// stream posts a streamed completion and reads it to the end.
func stream(ctx context.Context, hc *http.Client, url string, body []byte) streamResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return streamResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return streamResult{err: err}
	}
	defer func() {
		// Read to EOF so the connection is reused, as SDK clients do; closing a body early
		// closes the connection.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return streamResult{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	r := streamResult{pod: resp.Header.Get("X-Neuronetes-Pod"), id: resp.Header.Get("X-Request-Id")}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && bytes.HasPrefix(line, dataPrefix) {
			switch {
			case bytes.HasPrefix(line, doneLine):
				if r.chunks == 0 {
					r.err = errors.New("stream ended without a token")
				}
				return r
			case bytes.HasPrefix(line, errorLine):
				r.err = fmt.Errorf("error event: %s", bytes.TrimSpace(line))
				return r
			case isContent(line):
				if r.chunks == 0 {
					r.ttft = time.Since(start)
				}
				r.chunks++
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			r.err = fmt.Errorf("stream cut after %d chunks: %w", r.chunks, err)
			return r
		}
	}
}

// quantile is the q-quantile (0-1) of xs by linear interpolation; NaN for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
