package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neuronetes/neuronetes/dispatcher/gwclient"
	"github.com/neuronetes/neuronetes/dispatcher/queue"
)

// bare is the baseline: the same consumer group and publisher code as the dispatcher, calling
// the pods (round robin) or one URL directly, with no dedupe, no retries and no gateway.
type bare struct {
	targets  []string // base URLs
	apiKey   string
	model    string
	inFlight int
	out      string // result destination
	hc       *http.Client
	next     atomic.Uint64
	failures atomic.Int64
}

func (b *bare) run(ctx context.Context, c queue.Consumer, pub queue.Publisher) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, b.inFlight)
	for ctx.Err() == nil {
		free := b.inFlight - len(sem)
		if free == 0 {
			select {
			case sem <- struct{}{}:
				<-sem
			case <-ctx.Done():
			}
			continue
		}
		msgs, err := c.Fetch(ctx, free, 200*time.Millisecond)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		for _, m := range msgs {
			sem <- struct{}{}
			wg.Add(1)
			go func(m *queue.Message) {
				defer wg.Done()
				defer func() { <-sem }()
				b.handle(ctx, m, pub)
			}(m)
		}
	}
}

func (b *bare) handle(ctx context.Context, m *queue.Message, pub queue.Publisher) {
	body, _ := gwclient.BuildChat(m.Body, b.model, map[string]string{"neuronetes_message_id": m.ID})
	target := b.targets[int(b.next.Add(1))%len(b.targets)]
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if b.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+b.apiKey)
		}
		if m.Key != "" {
			req.Header.Set("X-Session-Id", m.Key)
		}
		resp, err := b.hc.Do(req)
		if err != nil {
			b.failures.Add(1)
			continue
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.failures.Add(1)
			continue
		}
		err = pub.Publish(ctx, queue.Outgoing{Dest: b.out, ID: "bare/" + m.ID, Key: m.Key, Body: out,
			Headers: map[string]string{queue.HeaderMessageID: m.ID, queue.HeaderRequestID: resp.Header.Get("X-Request-Id"), queue.HeaderAttempts: strconv.Itoa(attempt + 1)}}, false, time.Time{})
		if err != nil {
			b.failures.Add(1)
			fmt.Println("bare publish:", err)
			return
		}
		_ = m.Ack(ctx)
		return
	}
}
