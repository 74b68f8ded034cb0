// Package queuelag is the one definition of a queue's lag that the dispatcher (its queue
// providers) and the autoscaler (ToolBinding autoscaleOnLag) share: the messages a consumer
// group has not yet acknowledged. Before a group or consumer exists, every message kept is lag:
// the dispatcher has not consumed anything yet.
package queuelag

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
)

// Kafka sums, per partition of topic, the end offset minus group's committed offset (the log
// start when the group committed nothing on that partition).
func Kafka(ctx context.Context, adm *kadm.Client, topic, group string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka %s end offsets: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka %s start offsets: %w", topic, err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka %s group %s offsets: %w", topic, group, err)
	}
	if len(ends[topic]) == 0 {
		return 0, fmt.Errorf("kafka topic %s: no partitions (does it exist?)", topic)
	}
	var lag int64
	for part, end := range ends[topic] {
		if end.Err != nil {
			return 0, fmt.Errorf("kafka %s[%d]: %w", topic, part, end.Err)
		}
		from := starts[topic][part].Offset
		if c, ok := committed.Lookup(topic, part); ok && c.Err == nil && c.At >= 0 {
			from = max(from, c.At)
		}
		lag += max(end.Offset-from, 0)
	}
	return lag, nil
}

// Redis is group's entries of stream not yet delivered plus those delivered and not
// acknowledged (XINFO GROUPS lag + pending, Redis >= 7), or the stream's length when the group
// does not exist yet. A lag Redis cannot tell (entries deleted past the group) is an error.
func Redis(ctx context.Context, c *redis.Client, stream, group string) (int64, error) {
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil && !strings.Contains(err.Error(), "no such key") {
		return 0, fmt.Errorf("redis stream %s: %w", stream, err)
	}
	for _, g := range groups {
		if g.Name == group {
			if g.Lag < 0 {
				return 0, fmt.Errorf("redis stream %s group %s: lag unknown (entries were deleted)", stream, group)
			}
			return g.Lag + g.Pending, nil
		}
	}
	n, err := c.XLen(ctx, stream).Result()
	if err != nil {
		return 0, fmt.Errorf("redis stream %s: %w", stream, err)
	}
	return n, nil
}

// NATS is consumer's pending (undelivered) plus ack-pending (delivered, unacknowledged)
// messages on stream, or the stream's message count when consumer is "" or does not exist yet
// (a work-queue stream keeps a message until it is acknowledged).
func NATS(ctx context.Context, js jetstream.JetStream, stream, consumer string) (int64, error) {
	if consumer != "" {
		c, err := js.Consumer(ctx, stream, consumer)
		switch {
		case err == nil:
			info, err := c.Info(ctx)
			if err != nil {
				return 0, fmt.Errorf("consumer info %s/%s: %w", stream, consumer, err)
			}
			return int64(info.NumPending) + int64(info.NumAckPending), nil
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return 0, fmt.Errorf("consumer %s/%s: %w", stream, consumer, err)
		}
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info %s: %w", stream, err)
	}
	return int64(info.State.Msgs), nil
}
