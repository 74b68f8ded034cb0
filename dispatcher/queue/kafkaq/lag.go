package kafkaq

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/internal/queuelag"
)

// Lag implements queue.Provider: per partition, the end offset minus the group's committed
// offset (the log start when the group committed nothing), summed.
func (p *Provider) Lag(ctx context.Context, o queue.Options) (int64, error) {
	c, err := p.client(o.URL)
	if err != nil {
		return 0, err
	}
	return queuelag.Kafka(ctx, kadm.NewClient(c.cl), o.Queue, o.Group)
}
