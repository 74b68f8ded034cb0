package scaleloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/kafkaconn"
	"github.com/neuronetes/neuronetes/internal/queuelag"
	"github.com/neuronetes/neuronetes/internal/redisconn"
)

// The autoscaler reads the lag of every provider the dispatcher consumes (docs/dispatcher.md).
func init() {
	ServedProviders["kafka"] = true
	ServedProviders["redis"] = true
}

// DispatchGroup is the consumer group the dispatcher uses for a dispatched binding that names
// none (dispatcher/binding.DefaultGroup; the controller does not import the dispatcher).
func DispatchGroup(b *v1alpha1.ToolBinding) string {
	if q := b.Spec.QueueConfig; q != nil && q.ConsumerGroup != "" {
		return q.ConsumerGroup
	}
	return "neuronetes-" + b.Namespace + "-" + b.Name
}

// NATSQueueName is the "<stream>/<consumer>" whose lag LagSource reads: the consumer named in
// queueName, else consumerGroup, else the dispatcher's default group for a dispatched binding;
// a lag-only binding without a consumer keeps "<stream>" (the stream's message count).
func NATSQueueName(b *v1alpha1.ToolBinding) string {
	q := b.Spec.QueueConfig
	if strings.Contains(q.QueueName, "/") || (q.ConsumerGroup == "" && q.Dispatch == nil) {
		return q.QueueName
	}
	return q.QueueName + "/" + DispatchGroup(b)
}

// QueueLag reads the lag of Kafka topics and Redis streams for a consumer group: messages not
// yet acknowledged by it. A binding without a group is read as if consumed by the dispatcher's
// default group (everything is lag until a consumer commits).
type QueueLag struct {
	// Dial connects to brokers (a ToolBinding's queueConfig.url is user-chosen: the controller
	// passes the egress policy's dialer); nil dials directly. TLS URLs (kafkas://, rediss://)
	// do their handshake over Dial's connection.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DefaultKafkaURL and DefaultRedisURL serve bindings without queueConfig.url.
	DefaultKafkaURL, DefaultRedisURL string
	// Timeout bounds one lookup (default 5 s).
	Timeout time.Duration

	mu    sync.Mutex
	kafka map[string]*kgo.Client
	redis map[string]*redis.Client
}

// providerLag reads the lag of b; natsURL is the URL resolved for NATS.
func (l *Loop) providerLag(ctx context.Context, b *v1alpha1.ToolBinding, natsURL string) (int64, error) {
	q := b.Spec.QueueConfig
	switch q.Provider {
	case "", "nats":
		return l.Lag.Lag(ctx, natsURL, NATSQueueName(b))
	case "kafka", "redis":
		if l.Queues == nil {
			return 0, fmt.Errorf("no %s lag source configured", q.Provider)
		}
		return l.Queues.Lag(ctx, b)
	}
	return 0, fmt.Errorf("provider %s has no lag source", q.Provider)
}

// Lag returns the lag of a kafka or redis binding.
func (s *QueueLag) Lag(ctx context.Context, b *v1alpha1.ToolBinding) (int64, error) {
	t := s.Timeout
	if t <= 0 {
		t = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	q := b.Spec.QueueConfig
	switch q.Provider {
	case "kafka":
		url, field := q.URL, "queueConfig.url"
		if url == "" {
			url, field = s.DefaultKafkaURL, "--kafka-url"
		}
		c, err := s.kafkaClient(field, url)
		if err != nil {
			return 0, err
		}
		return queuelag.Kafka(ctx, kadm.NewClient(c), q.QueueName, DispatchGroup(b))
	case "redis":
		url := q.URL
		if url == "" {
			url = s.DefaultRedisURL
		}
		c, err := s.redisClient(url)
		if err != nil {
			return 0, err
		}
		return queuelag.Redis(ctx, c, q.QueueName, DispatchGroup(b))
	}
	return 0, fmt.Errorf("provider %s has no lag source", q.Provider)
}

// kafkaClient returns the cached client of url (internal/kafkaconn: TLS and SASL as the URL
// says, every connection through Dial); field names the setting in errors. The cache key is the
// whole URL: two URLs of the same brokers may differ in TLS or credentials.
func (s *QueueLag) kafkaClient(field, url string) (*kgo.Client, error) {
	if url == "" {
		return nil, errors.New("queueConfig.url: empty Kafka URL and no --kafka-url")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.kafka[url]; c != nil {
		return c, nil
	}
	o, err := kafkaconn.ParseURL(field, url)
	if err != nil {
		return nil, err
	}
	c, err := kgo.NewClient(o.Opts(s.Dial)...)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", o, err)
	}
	if s.kafka == nil {
		s.kafka = map[string]*kgo.Client{}
	}
	s.kafka[url] = c
	return c, nil
}

func (s *QueueLag) redisClient(url string) (*redis.Client, error) {
	if url == "" {
		return nil, errors.New("queueConfig.url: empty Redis URL and no --redis-queue-url")
	}
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.redis[url]; c != nil {
		return c, nil
	}
	o, err := redisconn.ParseURL("queueConfig.url", url)
	if err != nil {
		return nil, err
	}
	redisconn.SetDialer(o, s.Dial)
	c := redis.NewClient(o)
	if s.redis == nil {
		s.redis = map[string]*redis.Client{}
	}
	s.redis[url] = c
	return c, nil
}

// Close closes the cached clients.
func (s *QueueLag) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.kafka {
		c.Close()
		delete(s.kafka, k)
	}
	for k, c := range s.redis {
		_ = c.Close()
		delete(s.redis, k)
	}
}
