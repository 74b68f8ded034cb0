package serving

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// MinTokenBytes is the shortest bearer token RequireBearer accepts.
const MinTokenBytes = 16

// RequireLoopback checks that addr (host:port) binds a loopback address only: 127.0.0.0/8, ::1
// or localhost. An empty host (all interfaces) is refused.
func RequireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q does not bind a loopback address (use 127.0.0.1:<port> or [::1]:<port>)", addr)
	}
	return nil
}

// readToken reads a token file: surrounding white space is dropped, and the rest must be at
// least MinTokenBytes long.
func readToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read token: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinTokenBytes {
		return nil, fmt.Errorf("token in %s is %d bytes, shorter than %d", path, len(b), MinTokenBytes)
	}
	return b, nil
}

// RequireBearer returns a middleware that lets only requests with "Authorization: Bearer
// <token>" reach the handler it wraps, the token being the content of tokenFile. The file is
// read now (an unreadable or short token is an error) and again on each request, so a rotated
// Secret takes effect without a restart; while it cannot be read every request is refused.
func RequireBearer(tokenFile string) (func(http.Handler) http.Handler, error) {
	if tokenFile == "" {
		return nil, errors.New("no token file given")
	}
	if _, err := readToken(tokenFile); err != nil {
		return nil, err
	}
	return func(h http.Handler) http.Handler { return bearer(tokenFile, h) }, nil
}

func bearer(tokenFile string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := readToken(tokenFile)
		if err != nil {
			http.Error(w, "token unavailable", http.StatusServiceUnavailable)
			return
		}
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="debug"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
