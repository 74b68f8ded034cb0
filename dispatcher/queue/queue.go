// Package queue is the dispatcher's provider-neutral view of a work queue: messages fetched by a
// consumer group, acknowledged one by one, and outgoing messages (results, dead letters)
// published at most once per message id. Providers live in subpackages (natsq, kafkaq, redisq).
package queue

import (
	"context"
	"errors"
	"time"
)

// Headers every outgoing message carries (NATS headers, Kafka record headers, Redis entry fields).
const (
	// HeaderMessageID is the id of the input message the outgoing message belongs to.
	HeaderMessageID = "message-id"
	// HeaderCorrelationID is the input's correlation id (its header, else its message id).
	HeaderCorrelationID = "correlation-id"
	// HeaderRequestID is the gateway's request id of the attempt that produced a result.
	HeaderRequestID = "request-id"
	// HeaderKey is the NATS header a producer sets to give a message a key (Kafka has record
	// keys; a Redis entry has the field "key").
	HeaderKey = "neuronetes-key"
	// HeaderBinding names the ToolBinding (namespace/name).
	HeaderBinding = "neuronetes-binding"
	// HeaderPool and HeaderPod name the pool and pod that served a result.
	HeaderPool = "neuronetes-pool"
	HeaderPod  = "neuronetes-pod"
	// HeaderAttempts is the number of attempts made.
	HeaderAttempts = "neuronetes-attempts"
	// HeaderError is a dead letter's last error.
	HeaderError = "neuronetes-error"
)

// Message is one delivery of a queued message.
type Message struct {
	// ID identifies the message across redeliveries: the producer's id when it set one (NATS
	// Nats-Msg-Id, the Kafka header or Redis field "message-id"), else its broker position.
	ID string
	// Key is the message key ("" when none).
	Key string
	// Body is the payload.
	Body []byte
	// Headers are the producer's headers (lower-case names).
	Headers map[string]string
	// Delivery is the broker's delivery count (1 for the first), 0 when the broker does not say.
	Delivery int
	// Ack acknowledges the message: it is not delivered again.
	Ack func(ctx context.Context) error
	// KeepAlive tells the broker the message is still being worked on, so that it is not
	// redelivered to another consumer meanwhile. Called well within the ack deadline.
	KeepAlive func(ctx context.Context) error
}

// Outgoing is a message to publish.
type Outgoing struct {
	// Dest is the subject, topic or stream.
	Dest string
	// ID makes the publish idempotent: a second publish of the same ID to the same Dest is
	// dropped (NATS: Nats-Msg-Id within the stream's duplicate window; Redis: a marker set with
	// the entry in one script; Kafka: see Publisher.Publish).
	ID string
	// Key is the record key (Kafka; a field for Redis; a header for NATS).
	Key string
	// Body is the payload.
	Body []byte
	// Headers are sent with it.
	Headers map[string]string
}

// Consumer reads one queue as a member of a consumer group.
type Consumer interface {
	// Fetch returns between 1 and max messages, or none after at most wait. Messages of a dead
	// member are redelivered to the live ones by the broker (ack deadline, pending-entry claim,
	// partition reassignment).
	Fetch(ctx context.Context, max int, wait time.Duration) ([]*Message, error)
	// Close leaves the group (unacknowledged messages go back to the broker).
	Close() error
}

// Publisher publishes outgoing messages.
type Publisher interface {
	// Publish sends m. When recovering is true the caller may have published m before and does
	// not know (it crashed between publishing and recording it): providers without an
	// idempotent publish look for m.ID in m.Dest at or after since before sending again.
	Publish(ctx context.Context, m Outgoing, recovering bool, since time.Time) error
}

// Options are what a provider needs to attach to one queue.
type Options struct {
	// URL of the broker ("" for the provider default the process was given).
	URL string
	// Queue is the binding's queueName.
	Queue string
	// Group is the consumer group (durable consumer, Kafka group, Redis group).
	Group string
	// Member names this replica in the group (Redis consumer name; log and client ids).
	Member string
	// AckWait is how long a delivered, unacknowledged message stays with this member before the
	// broker may hand it to another (KeepAlive restarts it).
	AckWait time.Duration
	// MaxInFlight bounds the unacknowledged messages of the whole group where the broker can
	// enforce it (JetStream MaxAckPending); 0 for no bound.
	MaxInFlight int
}

// Provider connects to a broker kind.
type Provider interface {
	// Name is the CRD's provider value.
	Name() string
	// Consumer joins the group of o.Queue, creating the group (and, where the broker allows,
	// nothing else) when missing.
	Consumer(ctx context.Context, o Options) (Consumer, error)
	// Publisher returns a publisher on the broker at url.
	Publisher(ctx context.Context, url string) (Publisher, error)
	// Lag is the number of messages of o.Queue not yet acknowledged by the group.
	Lag(ctx context.Context, o Options) (int64, error)
}

// ErrClosed is returned by a closed consumer.
var ErrClosed = errors.New("queue: consumer closed")
