package kvindex

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/kvevents"
)

// Subscriber keeps one subscription per KV event address and feeds Index.
type Subscriber struct {
	// Index receives the events (required).
	Index *Index
	// Retry is the wait before redialling a publisher (default 1 s).
	Retry time.Duration
	// OnResult, if set, is told what each message did (metrics).
	OnResult func(Result)
	// OnError, if set, is told of each failed connection or malformed message.
	OnError func(error)

	mu      sync.Mutex
	running map[string]context.CancelFunc
}

// Sync makes the running subscriptions exactly addrs (KV event addresses, "tcp://host:port"):
// it starts the missing ones under ctx, and stops and forgets the others.
func (s *Subscriber) Sync(ctx context.Context, addrs map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[string]context.CancelFunc{}
	}
	for a, stop := range s.running {
		if !addrs[a] {
			stop()
			delete(s.running, a)
			s.Index.Forget(a)
		}
	}
	for a := range addrs {
		if _, ok := s.running[a]; ok || a == "" {
			continue
		}
		sctx, stop := context.WithCancel(ctx)
		s.running[a] = stop
		go s.run(sctx, a)
	}
}

// Running is the number of subscriptions.
func (s *Subscriber) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

func (s *Subscriber) run(ctx context.Context, addr string) {
	retry := s.Retry
	if retry <= 0 {
		retry = time.Second
	}
	logger := klog.FromContext(ctx).WithValues("kvEvents", addr)
	_ = kvevents.Subscribe(ctx, addr, retry,
		func() {
			logger.V(2).Info("Subscribed to KV events")
			s.Index.Connected(addr)
		},
		func(m kvevents.Message) {
			r := s.Index.Apply(addr, m)
			if r != Applied {
				logger.V(2).Info("KV index of the pod cleared", "result", r, "seq", m.Seq)
			}
			if s.OnResult != nil {
				s.OnResult(r)
			}
		},
		func(err error) {
			logger.V(4).Info("KV events", "err", err)
			if s.OnError != nil {
				s.OnError(err)
			}
		})
	if ctx.Err() == nil {
		logger.V(2).Info("KV event subscription ended")
	}
}
