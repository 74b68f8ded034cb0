package scaleloop

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// TestLagSourcesDialThroughEgress: a ToolBinding's queueConfig.url on a denied address is refused
// by every lag source's dialer (the controller connects to it only to read lag).
func TestLagSourcesDialThroughEgress(t *testing.T) {
	dial := (&egress.Policy{}).Dialer(time.Second)
	l := &LagSource{Dial: dial}
	defer l.Close()
	if _, err := l.conn("nats://169.254.169.254:4222", time.Second); err == nil || !strings.Contains(err.Error(), "egress denied") {
		t.Errorf("nats: %v, want an egress denial", err)
	}
	q := &QueueLag{Dial: dial}
	defer q.Close()
	c, err := q.redisClient("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "egress denied") {
		t.Errorf("redis: %v, want an egress denial", err)
	}
}
