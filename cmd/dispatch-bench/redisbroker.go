package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/redisq"
)

// redisBroker is Redis Streams on the bench's redis-server.
type redisBroker struct {
	addr string
	rc   *redis.Client
	p    *redisq.Provider
}

func newRedisBroker(addr string) *redisBroker {
	return &redisBroker{addr: addr, rc: redis.NewClient(&redis.Options{Addr: addr}), p: &redisq.Provider{DefaultURL: "redis://" + addr}}
}

func (b *redisBroker) provider() string              { return "redis" }
func (b *redisBroker) url() string                   { return "redis://" + b.addr }
func (b *redisBroker) queueProvider() queue.Provider { return b.p }
func (b *redisBroker) close()                        { b.p.Close(); _ = b.rc.Close() }
func (b *redisBroker) prepare(round string) (string, error) {
	return "in:" + round, nil
}

var _ broker = (*redisBroker)(nil)

func (b *redisBroker) produce(round string, i int) error {
	return b.rc.XAdd(context.Background(), &redis.XAddArgs{Stream: "in:" + round, Values: []any{"body", fmt.Sprintf("summarize document %d of round %s", i, round),
		"key", fmt.Sprintf("k-%d", i%64), queue.HeaderMessageID, fmt.Sprintf("m-%d", i)}}).Err()
}

func (b *redisBroker) flush() error { return nil }

func (b *redisBroker) collect(dest string, f func(id string)) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := "0"
		for ctx.Err() == nil {
			res, err := b.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{dest, last}, Count: 500, Block: 200 * time.Millisecond}).Result()
			if err != nil {
				continue
			}
			for _, s := range res {
				for _, m := range s.Messages {
					last = m.ID
					f(fmt.Sprint(m.Values[queue.HeaderMessageID]))
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }, nil
}

// destOf is a destination's name for a provider.
func destOf(provider, kind, round string) string {
	switch provider {
	case "nats":
		return kind + "." + round
	case "redis":
		return kind + ":" + round
	}
	return strings.Join([]string{kind, round}, "-")
}

// urlFlag is the dispatcher's default-broker flag of a provider.
func urlFlag(provider string) string {
	if provider == "redis" {
		return "--redis-queue-url"
	}
	return "--" + provider + "-url"
}
