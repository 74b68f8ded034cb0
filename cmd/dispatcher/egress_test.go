package main

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// TestQueuePolicy: the admin's default brokers are admitted, a binding's own URL on another
// internal address is not.
func TestQueuePolicy(t *testing.T) {
	o := &options{natsURL: "nats://nats.queues.svc:4222,nats://nats-2.queues.svc:4222", kafkaURL: "kafka-0.kafka:9092,kafka-1.kafka:9092",
		redisQueueURL: "redis://redis.queues.svc:6379/0", redisAddr: "10.0.0.9:6379"}
	q := queuePolicy(&egress.Policy{}, o)
	for _, h := range []string{"nats.queues.svc", "nats-2.queues.svc", "kafka-0.kafka", "kafka-1.kafka", "redis.queues.svc", "10.0.0.9"} {
		if !slices.Contains(q.AllowHosts, h) {
			t.Errorf("admin broker host %s not admitted: %v", h, q.AllowHosts)
		}
	}
	_, err := q.Dialer(0)(context.Background(), "tcp", "127.0.0.1:6379")
	if !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("a binding's loopback broker: %v, want an egress denial", err)
	}
}
