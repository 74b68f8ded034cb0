package route

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ParseKeySources parses "header:x-session-id,body:conversation_id,body:metadata.chat" into
// key sources.
func ParseKeySources(s string) ([]KeySource, error) {
	var out []KeySource
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kind, name, ok := strings.Cut(part, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("session key source %q: want header:<name> or body:<field>", part)
		}
		switch kind {
		case "header":
			out = append(out, KeySource{Header: name})
		case "body":
			if name != "conversation_id" && name != "user" && !(strings.HasPrefix(name, "metadata.") && len(name) > len("metadata.")) {
				return nil, fmt.Errorf("session key source %q: body field must be conversation_id, user or metadata.<key>", part)
			}
			out = append(out, KeySource{Body: name})
		default:
			return nil, fmt.Errorf("session key source %q: kind must be header or body", part)
		}
	}
	return out, nil
}

// ParseWeights parses "prefill=4,prefix=1,queue=1,kv=1,inflight=1,hash=1"; omitted scorers keep def's
// weight.
func ParseWeights(s string, def Weights) (Weights, error) {
	w := def
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || f < 0 {
			return w, fmt.Errorf("scorer weight %q: want <scorer>=<non-negative number>", part)
		}
		switch k {
		case "prefill":
			w.Prefill = f
		case "prefix":
			w.PrefixCache = f
		case "queue":
			w.Queue = f
		case "kv":
			w.KVCache = f
		case "inflight":
			w.InFlight = f
		case "hash":
			w.Hash = f
		default:
			return w, fmt.Errorf("scorer weight %q: scorer must be prefill, prefix, queue, kv, inflight or hash", part)
		}
	}
	return w, nil
}

// ParseBackends parses the static-backends list "http://127.0.0.1:8001,127.0.0.1:8002" into
// endpoints named by host:port, whose metrics are scraped at /metrics. A backend may name the
// port of its KV-cache events on the same host with a query, "http://127.0.0.1:8001?kv-events-port=5557".
func ParseBackends(s string) ([]Endpoint, error) {
	var out []Endpoint
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "://") {
			part = "http://" + part
		}
		u, err := url.Parse(part)
		if err != nil {
			return nil, fmt.Errorf("backend %q: %w", part, err)
		}
		if u.Scheme != "http" {
			return nil, fmt.Errorf("backend %q: only http:// backends are supported", part)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return nil, fmt.Errorf("backend %q: want host:port: %w", part, err)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("backend %q: a backend is host:port; the API paths are fixed (/v1/...)", part)
		}
		if seen[u.Host] {
			return nil, fmt.Errorf("backend %q listed twice", u.Host)
		}
		seen[u.Host] = true
		kv, err := kvEventsOf(u)
		if err != nil {
			return nil, fmt.Errorf("backend %q: %w", part, err)
		}
		out = append(out, Endpoint{Pod: u.Host, Addr: u.Host, MetricsURL: "http://" + u.Host + "/metrics", KVEvents: kv})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no backends")
	}
	return out, nil
}

// kvEventsOf reads a backend URL's kv-events-port query: the KV event address on the backend's
// host ("" without one); any other query is refused.
func kvEventsOf(u *url.URL) (string, error) {
	q := u.Query()
	port := q.Get("kv-events-port")
	q.Del("kv-events-port")
	if len(q) > 0 {
		return "", fmt.Errorf("the only query a backend takes is kv-events-port")
	}
	if port == "" {
		return "", nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("kv-events-port %q is not a port number", port)
	}
	return "tcp://" + net.JoinHostPort(u.Hostname(), port), nil
}
