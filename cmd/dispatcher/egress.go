package main

import (
	"net"
	"net/url"
	"strings"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// queuePolicy is p with the hosts of the admin's default brokers admitted: a binding's
// queueConfig.url is user-chosen and checked, the flags' brokers are the admin's own.
func queuePolicy(p *egress.Policy, o *options) *egress.Policy {
	q := *p
	q.AllowHosts = append([]string(nil), p.AllowHosts...)
	for _, u := range []string{o.natsURL, o.kafkaURL, o.redisQueueURL, o.redisAddr} {
		q.AllowHosts = append(q.AllowHosts, brokerHosts(u)...)
	}
	return &q
}

// brokerHosts returns the host names of a broker flag: a URL (nats://h:p, redis://h:p/0), a
// comma-separated list of URLs or host:port pairs (NATS and Kafka accept several).
func brokerHosts(v string) []string {
	var out []string
	for _, part := range egress.SplitList(v) {
		if !strings.Contains(part, "://") {
			part = "tcp://" + part
		}
		u, err := url.Parse(part)
		if err != nil {
			continue
		}
		h := u.Hostname()
		if h == "" {
			if host, _, err := net.SplitHostPort(u.Host); err == nil {
				h = host
			}
		}
		if h != "" {
			out = append(out, h)
		}
	}
	return out
}
