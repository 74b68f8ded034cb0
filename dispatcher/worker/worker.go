// Package worker is the dispatcher's per-message pipeline. For each delivered message:
//
//  1. Begin the message's dedupe record: a message already done or dead-lettered is
//     acknowledged without processing; a stored outcome (a replica died after computing it) is
//     published and acknowledged; another replica's live lease is waited out.
//  2. Call the pool through the gateway (session key from the message), at most Timeout per
//     attempt, keeping the record's lease and the broker's ack deadline alive meanwhile.
//  3. On success store the result, publish it to the response queue (idempotently), mark the
//     record done, and only then acknowledge the input.
//  4. On failure record it and retry after an exponential backoff with jitter; after MaxRetries
//     retries store, publish and mark a dead letter (the input unchanged, with its last error),
//     then acknowledge.
//
// A replica that loses its lease stops without publishing; a shutdown releases the lease and
// leaves the message unacknowledged for the broker to redeliver.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/dispatcher/backoff"
	"github.com/neuronetes/neuronetes/dispatcher/dedupe"
	"github.com/neuronetes/neuronetes/dispatcher/gwclient"
	"github.com/neuronetes/neuronetes/dispatcher/queue"
)

// MaxInterrupted is how many attempts may be started and never finish (the replica died while
// the agent worked) beyond MaxRetries+1 before the message is dead-lettered as one that keeps
// killing its consumers.
const MaxInterrupted = 10

// Config is one binding's dispatch settings.
type Config struct {
	// Binding is namespace/name; it scopes dedupe records and outgoing message ids.
	Binding string
	// Model is the model the gateway routes to the binding's pool.
	Model string
	// Pool is the bound AgentPool, namespace/name: the gateway serves the call by it alone.
	Pool string
	// ResponseQueue and DeadLetterQueue are the destinations.
	ResponseQueue, DeadLetterQueue string
	// MaxRetries after the first attempt.
	MaxRetries int
	// Timeout of one attempt.
	Timeout time.Duration
	// Backoff between attempts.
	Backoff backoff.Schedule
	// SessionKeyField is the JSON path of the session key in the payload ("" = message key).
	SessionKeyField string
	// DedupeTTL is how long a finished record is kept.
	DedupeTTL time.Duration
	// Lease is the dedupe lease; it is renewed every Lease/3 while the message is worked on.
	Lease time.Duration
}

// Caller sends one chat completion (gwclient.Client).
type Caller interface {
	Chat(ctx context.Context, pool, sessionKey string, body []byte) (*gwclient.Response, error)
}

// Observer receives the worker's events (dispatcher/metrics).
type Observer interface {
	// Event counts: received, succeeded, retried, dead_lettered, duplicate.
	Event(name string)
	// Attempt records one gateway call's duration and outcome.
	Attempt(d time.Duration, err error)
}

// Counter adds one to a binding's shared counter (dedupe.Batcher).
type Counter interface {
	Add(binding, name string)
}

// Event names.
const (
	EventReceived     = "received"
	EventSucceeded    = "succeeded"
	EventRetried      = "retried"
	EventDeadLettered = "dead_lettered"
	EventDuplicate    = "duplicate"
)

// Worker handles messages of one binding.
type Worker struct {
	Config
	// Member names this replica (the lease owner).
	Member string
	// Store holds the dedupe records.
	Store dedupe.Store
	// Caller calls the gateway.
	Caller Caller
	// Publisher publishes results and dead letters.
	Publisher queue.Publisher
	// Observer receives events (optional).
	Observer Observer
	// Counts batches the shared counters (optional: without it each event is one Store.Count).
	Counts Counter
	// Rand draws the jitter in [0,1) (default math/rand/v2).
	Rand func() float64
	// Sleep waits d or until ctx ends (default a timer).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Result says how Handle ended, for tests and logs.
type Result string

// Results of Handle.
const (
	Succeeded    Result = "succeeded"
	DeadLettered Result = "dead-lettered"
	Duplicate    Result = "duplicate"
	Abandoned    Result = "abandoned" // lease lost, shutdown or store failure: left to the broker
)

func (w *Worker) event(name string) {
	if w.Observer != nil {
		w.Observer.Event(name)
	}
	// Counters feed status.dispatch; a lost increment only understates a counter.
	if w.Counts != nil {
		w.Counts.Add(w.Binding, name)
	} else if w.Store != nil {
		_ = w.Store.Count(context.Background(), w.Binding, map[string]int64{name: 1})
	}
}

func (w *Worker) sleep(ctx context.Context, d time.Duration) error {
	if w.Sleep != nil {
		return w.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (w *Worker) rand() float64 {
	if w.Rand != nil {
		return w.Rand()
	}
	return rand.Float64()
}

// Handle processes one delivery until it is acknowledged or left to the broker.
func (w *Worker) Handle(ctx context.Context, m *queue.Message) Result {
	log := klog.FromContext(ctx).WithValues("binding", w.Binding, "messageID", m.ID)
	w.event(EventReceived)
	for {
		rec, err := w.Store.Begin(ctx, w.Binding, m.ID, w.Member, w.Lease, w.DedupeTTL)
		if err != nil {
			log.Error(err, "Dedupe store unavailable; message left to the broker")
			_ = w.sleep(ctx, time.Second)
			return Abandoned
		}
		switch rec.State {
		case dedupe.Done, dedupe.Dead:
			w.ack(ctx, m, log)
			w.event(EventDuplicate)
			return Duplicate
		case dedupe.Busy:
			// Another replica holds the message (it was redelivered while that replica still
			// works on it, or that replica died and its lease has not run out).
			if m.KeepAlive != nil {
				_ = m.KeepAlive(ctx)
			}
			if err := w.sleep(ctx, min(rec.Wait+10*time.Millisecond, w.Lease/3+1)); err != nil {
				return Abandoned
			}
			continue
		case dedupe.Result, dedupe.DeadPending:
			return w.withLease(ctx, m, func(ctx context.Context) Result { return w.republish(ctx, m, rec) })
		default:
			return w.withLease(ctx, m, func(ctx context.Context) Result { return w.process(ctx, m, rec) })
		}
	}
}

// withLease runs fn while a goroutine renews the lease and the broker's ack deadline; a lost
// lease cancels fn's context. Without a live lease at the end the lease is released.
func (w *Worker) withLease(ctx context.Context, m *queue.Message, fn func(context.Context) Result) Result {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(w.Lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := w.Store.Renew(ctx, w.Binding, m.ID, w.Member, w.Lease); errors.Is(err, dedupe.ErrLeaseLost) {
				cancel(err)
				return
			}
			if m.KeepAlive != nil {
				_ = m.KeepAlive(ctx)
			}
		}
	}()
	r := fn(ctx)
	cancel(nil)
	<-done
	if r == Abandoned {
		// Let a redelivery elsewhere in at once (a lost lease makes this a no-op).
		_ = w.Store.Release(context.WithoutCancel(ctx), w.Binding, m.ID, w.Member)
	}
	return r
}

func (w *Worker) ack(ctx context.Context, m *queue.Message, log klog.Logger) {
	if err := m.Ack(ctx); err != nil {
		// The record is final: a redelivery is acknowledged as a duplicate.
		log.Info("Ack failed; the message will be acknowledged when redelivered", "err", err)
	}
}

// exhausted reports whether the failures, or the attempts started (the one about to be made
// included), are beyond what the binding allows.
func (w *Worker) exhausted(failures, starts int) bool {
	return failures > w.MaxRetries || starts > w.MaxRetries+1+MaxInterrupted
}

func (w *Worker) process(ctx context.Context, m *queue.Message, rec dedupe.Record) Result {
	log := klog.FromContext(ctx).WithValues("binding", w.Binding, "messageID", m.ID)
	failures, lastErr := rec.Failures, rec.LastError
	if w.exhausted(failures, rec.Starts) {
		if lastErr == "" || failures <= w.MaxRetries {
			lastErr = fmt.Sprintf("%d attempts started and interrupted (the dispatcher replica died while each was processed)", rec.Starts-1)
		}
		return w.deadLetter(ctx, m, max(failures, rec.Starts-1), lastErr)
	}
	key := m.Key
	if w.SessionKeyField != "" {
		key = gwclient.Field(m.Body, w.SessionKeyField)
	}
	body, err := gwclient.BuildChat(m.Body, w.Model, map[string]string{"neuronetes_message_id": m.ID, "neuronetes_binding": w.Binding, "neuronetes_dispatcher": w.Member})
	if err != nil {
		// Retrying cannot help a payload that cannot become a request.
		return w.deadLetter(ctx, m, failures+1, err.Error())
	}
	for first := true; ; first = false {
		// Begin counted the first attempt; a retry is counted here.
		if !first {
			if _, err := w.Store.StartAttempt(ctx, w.Binding, m.ID, w.Member); err != nil {
				log.V(2).Info("Attempt not started", "err", err)
				return Abandoned
			}
		}
		actx, cancel := context.WithTimeout(ctx, w.Timeout)
		start := time.Now()
		resp, err := w.Caller.Chat(actx, w.Pool, key, body)
		cancel()
		if w.Observer != nil {
			w.Observer.Attempt(time.Since(start), err)
		}
		if err == nil {
			return w.succeed(ctx, m, resp, failures+1)
		}
		if ctx.Err() != nil {
			// Shutdown or lost lease: not the message's failure.
			return Abandoned
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("attempt timed out after %s: %w", w.Timeout, err)
		}
		n, serr := w.fail(ctx, m, err)
		if serr != nil {
			return Abandoned
		}
		failures = n
		if Permanent(err) {
			// The gateway's verdict on the request itself: running the agent again cannot
			// change it.
			return w.deadLetter(ctx, m, failures, lastError(err))
		}
		if failures > w.MaxRetries {
			return w.deadLetter(ctx, m, failures, lastError(err))
		}
		w.event(EventRetried)
		if err := w.sleep(ctx, w.retryDelay(failures, err)); err != nil {
			return Abandoned
		}
	}
}

// Permanent reports whether a failed call is the gateway's final answer on the request: a 4xx
// other than 408 (timeout), 409 (conflict), 425 (too early) and 429 (rate limited), e.g. 400 bad
// request, 401/403 credentials, 404 unknown model, 413 too large. Those go to the dead-letter
// queue at once; 429, 5xx and transport errors are retried.
func Permanent(err error) bool {
	var se *gwclient.StatusError
	if !errors.As(err, &se) || se.Status < 400 || se.Status > 499 {
		return false
	}
	switch se.Status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return true
}

// fail records cause; it returns the failure count, or the store's error.
func (w *Worker) fail(ctx context.Context, m *queue.Message, cause error) (int, error) {
	n, err := w.Store.Fail(ctx, w.Binding, m.ID, w.Member, lastError(cause))
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Failure not recorded", "binding", w.Binding, "messageID", m.ID, "err", err)
		return 0, err
	}
	return n, nil
}

func lastError(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 2048 {
		s = s[:2048]
	}
	return s
}

// retryDelay is the backoff before retry n, at least the gateway's Retry-After.
func (w *Worker) retryDelay(n int, err error) time.Duration {
	d := w.Backoff.Delay(n, w.rand())
	var se *gwclient.StatusError
	if errors.As(err, &se) && se.RetryAfter > d {
		d = min(se.RetryAfter, max(w.Backoff.Max, d))
	}
	return d
}

// outgoingID is the idempotency id of an outgoing message.
func (w *Worker) outgoingID(kind, id string) string {
	return w.Binding + "/" + kind + "/" + id
}

func correlationID(m *queue.Message) string {
	if c := m.Headers[queue.HeaderCorrelationID]; c != "" {
		return c
	}
	return m.ID
}

func (w *Worker) succeed(ctx context.Context, m *queue.Message, resp *gwclient.Response, attempts int) Result {
	out := queue.Outgoing{Dest: w.ResponseQueue, ID: w.outgoingID("result", m.ID), Key: m.Key, Body: resp.Body,
		Headers: map[string]string{
			queue.HeaderMessageID: m.ID, queue.HeaderCorrelationID: correlationID(m), queue.HeaderRequestID: resp.RequestID,
			queue.HeaderBinding: w.Binding, queue.HeaderPool: resp.Pool, queue.HeaderPod: resp.Pod,
			queue.HeaderAttempts: strconv.Itoa(attempts),
		}}
	return w.finish(ctx, m, out, dedupe.Result, false, time.Time{})
}

func (w *Worker) deadLetter(ctx context.Context, m *queue.Message, attempts int, msg string) Result {
	h := map[string]string{}
	for k, v := range m.Headers {
		h[k] = v
	}
	for k, v := range map[string]string{queue.HeaderMessageID: m.ID, queue.HeaderCorrelationID: correlationID(m),
		queue.HeaderBinding: w.Binding, queue.HeaderAttempts: strconv.Itoa(attempts), queue.HeaderError: msg} {
		h[k] = v
	}
	out := queue.Outgoing{Dest: w.DeadLetterQueue, ID: w.outgoingID("dead", m.ID), Key: m.Key, Body: m.Body, Headers: h}
	klog.FromContext(ctx).Info("Message dead-lettered", "binding", w.Binding, "messageID", m.ID, "attempts", attempts, "error", msg)
	return w.finish(ctx, m, out, dedupe.DeadPending, false, time.Time{})
}

// meta is an outgoing message without its body, stored next to it.
type meta struct {
	Dest    string            `json:"dest"`
	ID      string            `json:"id"`
	Key     string            `json:"key,omitempty"`
	Headers map[string]string `json:"headers"`
}

// finish stores out (unless it was already stored), publishes it, marks the record final and
// acknowledges the input.
func (w *Worker) finish(ctx context.Context, m *queue.Message, out queue.Outgoing, state dedupe.State, recovering bool, since time.Time) Result {
	log := klog.FromContext(ctx).WithValues("binding", w.Binding, "messageID", m.ID)
	if !recovering {
		mb, _ := json.Marshal(meta{Dest: out.Dest, ID: out.ID, Key: out.Key, Headers: out.Headers})
		if err := w.Store.SaveOutcome(ctx, w.Binding, m.ID, w.Member, state, out.Body, mb); err != nil {
			log.V(2).Info("Outcome not stored", "err", err)
			return Abandoned
		}
		since = time.Now().Add(-time.Minute) // a clock-skew margin for providers that search
	}
	for n := 1; ; n++ {
		err := w.Publisher.Publish(ctx, out, recovering, since)
		if err == nil {
			break
		}
		log.Info("Publish failed; retrying", "dest", out.Dest, "err", err)
		// From here on the outcome may have been published: search before sending again.
		recovering = true
		if err := w.sleep(ctx, w.Backoff.Delay(n, w.rand())); err != nil {
			return Abandoned
		}
	}
	final, ev, res := dedupe.Done, EventSucceeded, Succeeded
	if state == dedupe.DeadPending {
		final, ev, res = dedupe.Dead, EventDeadLettered, DeadLettered
	}
	if err := w.Store.Finish(ctx, w.Binding, m.ID, w.Member, final, w.DedupeTTL); err != nil {
		// Published but not marked: the next delivery finds the stored outcome and republishes
		// it idempotently.
		log.V(2).Info("Outcome published but not marked final", "err", err)
		return Abandoned
	}
	w.ack(ctx, m, log)
	w.event(ev)
	return res
}

// republish publishes an outcome a previous owner stored and may or may not have published.
func (w *Worker) republish(ctx context.Context, m *queue.Message, rec dedupe.Record) Result {
	var mt meta
	if err := json.Unmarshal(rec.Meta, &mt); err != nil {
		klog.FromContext(ctx).Error(err, "Stored outcome unreadable; processing again", "binding", w.Binding, "messageID", m.ID)
		return w.process(ctx, m, rec)
	}
	out := queue.Outgoing{Dest: mt.Dest, ID: mt.ID, Key: mt.Key, Body: rec.Outcome, Headers: mt.Headers}
	return w.finish(ctx, m, out, rec.State, true, rec.Saved.Add(-time.Minute))
}
