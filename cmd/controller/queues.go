package main

import (
	"context"
	"flag"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/neuronetes/neuronetes/controller/scaleloop"
	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/internal/kafkaconn"
)

// queueLagOptions are the default brokers of kafka and redis ToolBindings for queue-lag scaling
// (--nats-url serves nats).
type queueLagOptions struct {
	kafkaURL, redisURL string
}

var queueLag queueLagOptions

// queueEgress is the policy of the brokers a ToolBinding's queueConfig.url names (chart egress.*);
// the hosts of --nats-url, --kafka-url and --redis-queue-url are admitted.
var queueEgress egress.Flags

func init() {
	queueEgress.Register(flag.CommandLine)
	flag.StringVar(&queueLag.kafkaURL, "kafka-url", "", "Kafka brokers of ToolBindings that name no queueConfig.url (queue-lag scaling): host:port[,...], kafka://host:port[,...], or kafkas://[user:pass@]host:port[,...][?sasl=plain|scram-sha-256|scram-sha-512] (TLS, SASL)")
	flag.StringVar(&queueLag.redisURL, "redis-queue-url", "", "Redis (redis://host:port/db) of redis-provider ToolBindings that name no queueConfig.url (queue-lag scaling)")
}

// apply gives the loop its Kafka and Redis Streams lag source, closed when the manager stops,
// and makes every lag source (NATS included, default natsURL) dial through the egress policy.
func (o queueLagOptions) apply(l *scaleloop.Loop, mgr ctrl.Manager, natsURL string) error {
	pol, err := queueEgress.Policy()
	if err != nil {
		return err
	}
	if o.kafkaURL != "" {
		if _, err := kafkaconn.ParseURL("--kafka-url", o.kafkaURL); err != nil {
			return err
		}
	}
	dial := pol.WithHosts(natsURL, o.kafkaURL, o.redisURL).Dialer(egress.DefaultDialTimeout)
	if l.Lag != nil {
		l.Lag.Dial = dial
	}
	l.Queues = &scaleloop.QueueLag{DefaultKafkaURL: o.kafkaURL, DefaultRedisURL: o.redisURL, Dial: dial}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		l.Queues.Close()
		return nil
	}))
}
