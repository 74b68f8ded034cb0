package main

import "github.com/neuronetes/neuronetes/internal/egress"

// queuePolicy is p with the hosts of the admin's default brokers admitted: a binding's
// queueConfig.url is user-chosen and checked, the flags' brokers are the admin's own.
func queuePolicy(p *egress.Policy, o *options) *egress.Policy {
	return p.WithHosts(o.natsURL, o.kafkaURL, o.redisQueueURL, o.redisAddr)
}
