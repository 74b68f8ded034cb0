package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

// TestFastRequestErrors checks the fasthttp engine's answers to requests it
// refuses before any handler runs: the API's JSON error format with the
// right status, not fasthttp's plain-text 400. The requests are written by
// hand so that the answer can be read before the body is sent.
func TestFastRequestErrors(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	f := newFixtureOn(t, "fasthttp", rs.Addr, "team-a", store.Options{MaxSize: 4096})
	addr := strings.TrimPrefix(f.url, "http://")
	for _, tc := range []struct {
		name string
		req  string
		want int
	}{
		{"body over the server limit", "PUT /v1/sessions/c HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n", http.StatusRequestEntityTooLarge},
		{"header over the read buffer", "GET /v1/sessions/c HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"malformed request line", "GARBAGE\r\n\r\n", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want || resp.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(string(body), `{"error":"request: `) {
				t.Fatalf("= %d %q %s; want %d with a JSON error", resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.want)
			}
		})
	}
}

func TestFastRoute(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		op, id       string
		ok           bool
	}{
		{"GET", "/v1/sessions/c1", "session_get", "c1", true},
		{"PUT", "/v1/sessions/c1", "session_put", "c1", true},
		{"DELETE", "/v1/sessions/c1", "session_delete", "c1", true},
		{"POST", "/v1/sessions/c1/turns", "session_append", "c1", true},
		{"POST", "/v1/sessions/c1", "", "", false},
		{"GET", "/v1/sessions/c1/turns", "", "", false},
		{"POST", "/v1/sessions//turns", "", "", false},
		{"POST", "/v1/sessions/a/b/turns", "", "", false},
		{"GET", "/v1/sessions/", "", "", false},
		{"GET", "/v1/sessions/a/b", "", "", false},
		{"HEAD", "/v1/sessions/c1", "", "", false},
		{"GET", "/v1/vectors/x", "", "", false},
	} {
		t.Run(fmt.Sprintf("%s %s", tc.method, tc.path), func(t *testing.T) {
			op, id, ok := fastRoute(tc.method, tc.path)
			if op != tc.op || id != tc.id || ok != tc.ok {
				t.Fatalf("fastRoute = %q %q %v; want %q %q %v", op, id, ok, tc.op, tc.id, tc.ok)
			}
		})
	}
}
