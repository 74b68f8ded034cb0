// Package retryafter reads the HTTP Retry-After header (RFC 9110 section 10.2.3) in both of its
// forms, delay-seconds and an HTTP-date, for every client of the project that honours it.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse returns the wait the header value asks for, measured from now. ok is false for an empty
// or malformed value; a date in the past is a zero wait with ok true.
func Parse(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		// Beyond a year is no delay a client waits for; clamp rather than overflow.
		return time.Duration(min(s, 366*24*3600)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// From reads the Retry-After header of h (0 when absent or malformed).
func From(h http.Header, now time.Time) time.Duration {
	d, _ := Parse(h.Get("Retry-After"), now)
	return d
}
