package redisq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/queuetest"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func TestConformance(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	p := &Provider{}
	t.Cleanup(p.Close)
	ctx := context.Background()
	queuetest.Suite{
		Provider: p,
		Options:  queue.Options{URL: "redis://" + srv.Addr, Queue: "in", Group: "dispatch", AckWait: 1500 * time.Millisecond},
		Dest:     "out",
		Produce: func(t *testing.T, id, key, body string) {
			if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "in", Values: []any{"body", body, "key", key, "message-id", id}}).Err(); err != nil {
				t.Fatal(err)
			}
		},
		Read: func(t *testing.T, dest string) []queuetest.Record {
			ms, err := rc.XRange(ctx, dest, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			var out []queuetest.Record
			for _, m := range ms {
				r := queuetest.Record{Headers: map[string]string{}}
				for k, v := range m.Values {
					switch k {
					case "body":
						r.Body = v.(string)
					case "key":
						r.Key = v.(string)
					default:
						r.Headers[k] = v.(string)
					}
				}
				out = append(out, r)
			}
			return out
		},
	}.Run(t)
}

// An entry without a body field is passed as its fields in JSON; a missing URL is named.
func TestEntryShapes(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	ctx := context.Background()
	p := &Provider{DefaultURL: srv.Addr}
	t.Cleanup(p.Close)
	c, err := p.Consumer(ctx, queue.Options{Queue: "s", Group: "g", Member: "m", AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := rc.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"q", "hello", "correlation-id", "c1"}}).Val()
	ms, err := c.Fetch(ctx, 5, time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("fetch = %v, %v", ms, err)
	}
	m := ms[0]
	if m.ID != id || m.Key != "" || !strings.Contains(string(m.Body), `"q":"hello"`) || m.Headers["correlation-id"] != "c1" {
		t.Fatalf("message = %+v body %s", m, m.Body)
	}
	if _, err := (&Provider{}).Consumer(ctx, queue.Options{Queue: "s", Group: "g", Member: "m"}); err == nil || !strings.Contains(err.Error(), "queueConfig.url") {
		t.Fatalf("no URL: %v", err)
	}
}
