package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
)

// Runner feeds a consumer's messages to a worker with a bounded number in flight.
type Runner struct {
	// Consumer is the queue.
	Consumer queue.Consumer
	// Worker handles each message.
	Worker *Worker
	// Limit returns the current in-flight limit of this replica; 0 pauses fetching (e.g. the pool
	// has no ready replica).
	Limit func() int
	// FetchWait bounds one fetch (default 1s).
	FetchWait time.Duration
	// OnError is told about fetch errors (they are logged and retried), and called with nil at
	// the first successful fetch after one (optional).
	OnError func(error)

	inFlight atomic.Int64
}

// InFlight is the number of messages being handled.
func (r *Runner) InFlight() int64 { return r.inFlight.Load() }

// Run fetches until stop ends, then waits for the messages in flight; work is their context
// (cancel it to abandon them, e.g. after a drain timeout). It returns after every handler ended.
func (r *Runner) Run(stop, work context.Context) error {
	log := klog.FromContext(work)
	wait := r.FetchWait
	if wait <= 0 {
		wait = time.Second
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	slot := make(chan struct{}, 1) // signalled when a handler ends
	backoff := 100 * time.Millisecond
	failing := false
	for stop.Err() == nil {
		free := r.Limit() - int(r.inFlight.Load())
		if free <= 0 {
			select {
			case <-stop.Done():
			case <-slot:
			case <-time.After(wait):
			}
			continue
		}
		msgs, err := r.Consumer.Fetch(stop, free, wait)
		if err != nil {
			if stop.Err() != nil || errors.Is(err, queue.ErrClosed) {
				break
			}
			log.V(1).Info("Fetch failed", "err", err)
			failing = true
			if r.OnError != nil {
				r.OnError(err)
			}
			select {
			case <-stop.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if failing && r.OnError != nil {
			r.OnError(nil)
		}
		failing = false
		for _, m := range msgs {
			r.inFlight.Add(1)
			wg.Add(1)
			go func(m *queue.Message) {
				defer wg.Done()
				r.Worker.Handle(work, m)
				r.inFlight.Add(-1)
				select {
				case slot <- struct{}{}:
				default:
				}
			}(m)
		}
	}
	return nil
}
