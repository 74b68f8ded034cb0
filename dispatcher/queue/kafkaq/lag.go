package kafkaq

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
)

// Lag implements queue.Provider: per partition, the end offset minus the group's committed
// offset (the log start when the group committed nothing), summed.
func (p *Provider) Lag(ctx context.Context, o queue.Options) (int64, error) {
	c, err := p.client(o.URL)
	if err != nil {
		return 0, err
	}
	return TopicLag(ctx, kadm.NewClient(c), o.Queue, o.Group)
}

// TopicLag is the lag of group on topic.
func TopicLag(ctx context.Context, adm *kadm.Client, topic, group string) (int64, error) {
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
