package main

import (
	"context"
	"flag"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/neuronetes/neuronetes/controller/scaleloop"
)

// queueLagOptions are the default brokers of kafka and redis ToolBindings for queue-lag scaling
// (--nats-url serves nats).
type queueLagOptions struct {
	kafkaURL, redisURL string
}

var queueLag queueLagOptions

func init() {
	flag.StringVar(&queueLag.kafkaURL, "kafka-url", "", "Kafka brokers (host:port,...) of ToolBindings that name no queueConfig.url (queue-lag scaling)")
	flag.StringVar(&queueLag.redisURL, "redis-queue-url", "", "Redis (redis://host:port/db) of redis-provider ToolBindings that name no queueConfig.url (queue-lag scaling)")
}

// apply gives the loop its Kafka and Redis Streams lag source, closed when the manager stops.
func (o queueLagOptions) apply(l *scaleloop.Loop, mgr ctrl.Manager) error {
	l.Queues = &scaleloop.QueueLag{DefaultKafkaURL: o.kafkaURL, DefaultRedisURL: o.redisURL}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		l.Queues.Close()
		return nil
	}))
}
