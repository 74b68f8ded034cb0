// Package affinity keeps sessions on pods: it extracts a request's session key, places new
// sessions by consistent hashing with bounded loads, and keeps pins (session key -> pod, with a
// TTL refreshed on use) in Redis, shared by every gateway replica, with an in-memory table that
// serves while Redis is unreachable and whose pins are written back when it returns.
package affinity

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// MaxKeyLen bounds a session key; longer values are cut to this many bytes before hashing.
const MaxKeyLen = 1024

// Extract returns the session key of a request and the source it came from: the first
// non-empty value among sources, in order. A request without any has key "".
func Extract(sources []route.KeySource, h http.Header, req *openai.Request) (key string, from route.KeySource) {
	for _, s := range sources {
		if v := Normalize(value(s, h, req)); v != "" {
			return v, s
		}
	}
	return "", route.KeySource{}
}

// Normalize is the form a key source's value takes as a session key: surrounding white space
// trimmed, cut to MaxKeyLen bytes.
func Normalize(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > MaxKeyLen {
		v = v[:MaxKeyLen]
	}
	return v
}

// CheckKey refuses a session key that is not valid UTF-8 or holds a control character (C0, DEL
// or C1): no client means such a key, and it would not survive a header or a log line.
func CheckKey(key string) error {
	if !utf8.ValidString(key) {
		return fmt.Errorf("session key is not valid UTF-8")
	}
	for i, r := range key {
		if r < 0x20 || r >= 0x7f && r < 0xa0 {
			return fmt.Errorf("session key has control character %U at byte %d", r, i)
		}
	}
	return nil
}

func value(s route.KeySource, h http.Header, req *openai.Request) string {
	if s.Header != "" {
		return h.Get(s.Header)
	}
	if req == nil {
		return ""
	}
	switch {
	case s.Body == "conversation_id":
		return req.ConversationID
	case s.Body == "user":
		return req.User
	case strings.HasPrefix(s.Body, "metadata."):
		return req.Metadata[strings.TrimPrefix(s.Body, "metadata.")]
	}
	return ""
}
