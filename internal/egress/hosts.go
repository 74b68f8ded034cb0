package egress

import (
	"net/url"
	"strings"
)

// URLHosts returns the host names of an admin's broker or endpoint setting: a URL
// (nats://h:p, redis://h:p/0, kafkas://user:pass@h:p,h2:p?sasl=...), host:port, or a
// comma-separated list of either.
func URLHosts(v string) []string {
	var out []string
	for _, part := range SplitList(v) {
		if !strings.Contains(part, "://") {
			part = "tcp://" + part
		}
		if u, err := url.Parse(part); err == nil && u.Hostname() != "" {
			out = append(out, u.Hostname())
		}
	}
	return out
}

// WithHosts returns a copy of p that also admits the host names of the given admin settings
// (URLHosts of each): an admin's own default broker or endpoint is admitted, a user's is checked.
func (p *Policy) WithHosts(settings ...string) *Policy {
	q := Policy{}
	if p != nil {
		q = *p
	}
	q.AllowHosts = append([]string(nil), q.AllowHosts...)
	for _, s := range settings {
		q.AllowHosts = append(q.AllowHosts, URLHosts(s)...)
	}
	return &q
}
