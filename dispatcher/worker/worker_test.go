package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/dispatcher/backoff"
	"github.com/neuronetes/neuronetes/dispatcher/dedupe"
	"github.com/neuronetes/neuronetes/dispatcher/gwclient"
	"github.com/neuronetes/neuronetes/dispatcher/queue"
)

// log is the ordered record of what the fakes saw.
type log struct {
	mu     sync.Mutex
	events []string
}

func (l *log) add(s string) { l.mu.Lock(); l.events = append(l.events, s); l.mu.Unlock() }
func (l *log) all() string  { l.mu.Lock(); defer l.mu.Unlock(); return strings.Join(l.events, ",") }

type fakeCaller struct {
	l     *log
	calls int
	fail  func(n int) error // error of call n (1-based); nil succeeds
	block bool
}

func (c *fakeCaller) Chat(ctx context.Context, pool, key string, body []byte) (*gwclient.Response, error) {
	c.calls++
	if pool != "ns/workers" {
		return nil, fmt.Errorf("called for pool %q, want the bound ns/workers", pool)
	}
	c.l.add("call:" + key)
	if c.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if c.fail != nil {
		if err := c.fail(c.calls); err != nil {
			return nil, err
		}
	}
	return &gwclient.Response{Body: []byte(`{"choices":[{}]}`), RequestID: "req-1", Pod: "pod-a", Pool: "pool"}, nil
}

type fakePub struct {
	l    *log
	fail int // fail this many publishes first
	out  []queue.Outgoing
	rec  []bool
}

func (p *fakePub) Publish(_ context.Context, m queue.Outgoing, recovering bool, since time.Time) error {
	if p.fail > 0 {
		p.fail--
		p.l.add("publish-failed")
		return errors.New("broker down")
	}
	p.l.add("publish:" + m.Dest)
	p.out, p.rec = append(p.out, m), append(p.rec, recovering)
	return nil
}

func msg(l *log, id string) *queue.Message {
	return &queue.Message{ID: id, Key: "k-" + id, Body: []byte("do " + id), Headers: map[string]string{"trace": "t"},
		Ack: func(context.Context) error { l.add("ack:" + id); return nil }}
}

func newWorker(l *log, s dedupe.Store, c Caller, p queue.Publisher, sleeps *[]time.Duration) *Worker {
	return &Worker{
		Config: Config{Binding: "ns/b", Model: "m", Pool: "ns/workers", ResponseQueue: "out", DeadLetterQueue: "dlq", MaxRetries: 2,
			Timeout: 200 * time.Millisecond, Backoff: backoff.Schedule{Initial: time.Second, Max: 4 * time.Second},
			DedupeTTL: time.Hour, Lease: time.Minute},
		Member: "w1", Store: s, Caller: c, Publisher: p, Rand: func() float64 { return 0.5 },
		Sleep: func(ctx context.Context, d time.Duration) error { *sleeps = append(*sleeps, d); return ctx.Err() },
	}
}

func TestHandle(t *testing.T) {
	boom := errors.New("connection reset")
	for _, tc := range []struct {
		name      string
		fail      func(int) error
		want      Result
		calls     int
		sleeps    []time.Duration
		dest, err string
		attempts  string
	}{
		{"first try", nil, Succeeded, 1, nil, "out", "", "1"},
		{"two failures then success", func(n int) error {
			if n < 3 {
				return boom
			}
			return nil
		}, Succeeded, 3, []time.Duration{500 * time.Millisecond, time.Second}, "out", "", "3"},
		{"retry-after wins over a shorter backoff", func(n int) error {
			if n == 1 {
				return &gwclient.StatusError{Status: 429, RetryAfter: 3 * time.Second}
			}
			return nil
		}, Succeeded, 2, []time.Duration{3 * time.Second}, "out", "", "2"},
		{"poison message is dead-lettered at once", func(int) error {
			return &gwclient.StatusError{Status: 400, Code: "invalid_request", Message: "messages: bad"}
		},
			DeadLettered, 1, nil, "dlq", "gateway 400 invalid_request: messages: bad", "1"},
		{"unknown model is dead-lettered at once", func(int) error {
			return &gwclient.StatusError{Status: 404, Code: "model_not_found", Message: "no such model"}
		},
			DeadLettered, 1, nil, "dlq", "gateway 404 model_not_found: no such model", "1"},
		{"5xx is retried until MaxRetries", func(int) error {
			return &gwclient.StatusError{Status: 502, Code: "backend_error", Message: "down"}
		},
			DeadLettered, 3, []time.Duration{500 * time.Millisecond, time.Second}, "dlq", "gateway 502 backend_error: down", "3"},
		{"429 is retried after its Retry-After", func(n int) error {
			if n == 1 {
				return &gwclient.StatusError{Status: 429, Code: "quota_tokens", RetryAfter: 2 * time.Second}
			}
			return nil
		}, Succeeded, 2, []time.Duration{2 * time.Second}, "out", "", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, sleeps := &log{}, []time.Duration{}
			store, pub := &dedupe.Memory{}, &fakePub{l: l}
			c := &fakeCaller{l: l, fail: tc.fail}
			w := newWorker(l, store, c, pub, &sleeps)
			if got := w.Handle(context.Background(), msg(l, "m1")); got != tc.want {
				t.Fatalf("Handle = %s, want %s (events %s)", got, tc.want, l.all())
			}
			if c.calls != tc.calls || len(sleeps) != len(tc.sleeps) {
				t.Fatalf("calls = %d sleeps = %v, want %d %v", c.calls, sleeps, tc.calls, tc.sleeps)
			}
			for i := range sleeps {
				if sleeps[i] != tc.sleeps[i] {
					t.Fatalf("sleeps = %v, want %v", sleeps, tc.sleeps)
				}
			}
			ev := l.all()
			if !strings.HasSuffix(ev, "publish:"+tc.dest+",ack:m1") {
				t.Fatalf("events %s: want the publish to %s right before the ack", ev, tc.dest)
			}
			o := pub.out[0]
			if o.Headers[queue.HeaderMessageID] != "m1" || o.Headers[queue.HeaderCorrelationID] != "m1" || o.Headers[queue.HeaderAttempts] != tc.attempts || o.Key != "k-m1" {
				t.Fatalf("outgoing = %+v", o)
			}
			if tc.dest == "dlq" {
				if string(o.Body) != "do m1" || o.Headers[queue.HeaderError] != tc.err || o.Headers["trace"] != "t" {
					t.Fatalf("dead letter = %+v, want the input unchanged with its error %q", o, tc.err)
				}
			} else if o.Headers[queue.HeaderRequestID] != "req-1" || o.Headers[queue.HeaderPod] != "pod-a" {
				t.Fatalf("result headers = %v", o.Headers)
			}
			// A redelivery is acknowledged without calling the agent or publishing again.
			if got := w.Handle(context.Background(), msg(l, "m1")); got != Duplicate || c.calls != tc.calls || len(pub.out) != 1 {
				t.Fatalf("redelivery: %s calls=%d publishes=%d", got, c.calls, len(pub.out))
			}
			cnt, _ := store.Counters(context.Background(), "ns/b")
			if cnt[EventReceived] != 2 || cnt[EventDuplicate] != 1 || cnt[EventRetried] != int64(len(tc.sleeps)) {
				t.Fatalf("counters = %v", cnt)
			}
		})
	}
}

// A replica that dies after storing its result (here: the broker refuses the publish until the
// replica is stopped) leaves the outcome to the next owner, which publishes it without calling
// the agent again, as a recovering publish.
func TestStoredOutcomeIsRepublished(t *testing.T) {
	l, sleeps := &log{}, []time.Duration{}
	now := time.Unix(5000, 0)
	store := &dedupe.Memory{Now: func() time.Time { return now }}
	pub := &fakePub{l: l, fail: 1}
	c := &fakeCaller{l: l}
	w1 := newWorker(l, store, c, pub, &sleeps)
	ctx, cancel := context.WithCancel(context.Background())
	w1.Sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	if got := w1.Handle(ctx, msg(l, "m1")); got != Abandoned {
		t.Fatalf("first replica: %s", got)
	}
	w2 := newWorker(l, store, c, pub, &sleeps)
	w2.Member = "w2"
	if got := w2.Handle(context.Background(), msg(l, "m1")); got != Succeeded {
		t.Fatalf("second replica: %s (%s)", got, l.all())
	}
	if c.calls != 1 || len(pub.out) != 1 || !pub.rec[0] {
		t.Fatalf("calls=%d publishes=%d recovering=%v, want one call and one recovering publish", c.calls, len(pub.out), pub.rec)
	}
}

// A replica whose lease was taken over publishes nothing and does not acknowledge.
func TestLostLeasePublishesNothing(t *testing.T) {
	l, sleeps := &log{}, []time.Duration{}
	now := time.Unix(5000, 0)
	store := &dedupe.Memory{Now: func() time.Time { return now }}
	pub := &fakePub{l: l}
	c := &fakeCaller{l: l, fail: func(int) error {
		now = now.Add(2 * time.Minute) // the call outlives the lease ...
		if _, err := store.Begin(context.Background(), "ns/b", "m1", "other", time.Minute, time.Hour); err != nil {
			panic(err) // ... and another replica takes the message over
		}
		return nil
	}}
	w := newWorker(l, store, c, pub, &sleeps)
	if got := w.Handle(context.Background(), msg(l, "m1")); got != Abandoned || len(pub.out) != 0 || strings.Contains(l.all(), "ack") {
		t.Fatalf("Handle = %s, published %d, events %s", got, len(pub.out), l.all())
	}
}

// An attempt that outlives Timeout is a failure like any other.
func TestAttemptTimeout(t *testing.T) {
	l, sleeps := &log{}, []time.Duration{}
	c := &fakeCaller{l: l, block: true}
	pub := &fakePub{l: l}
	w := newWorker(l, &dedupe.Memory{}, c, pub, &sleeps)
	w.MaxRetries = 0
	w.Timeout = 20 * time.Millisecond
	if got := w.Handle(context.Background(), msg(l, "m1")); got != DeadLettered {
		t.Fatalf("Handle = %s", got)
	}
	if e := pub.out[0].Headers[queue.HeaderError]; !strings.Contains(e, "timed out after 20ms") {
		t.Fatalf("error header = %q", e)
	}
}

// Attempts interrupted by dying replicas count separately; past MaxRetries+1+MaxInterrupted the
// message is dead-lettered instead of killing consumers forever.
func TestInterruptedAttempts(t *testing.T) {
	l, sleeps := &log{}, []time.Duration{}
	store := &dedupe.Memory{}
	ctx := context.Background()
	for i := 0; i < 3+MaxInterrupted; i++ {
		owner := "dead-" + string(rune('a'+i))
		if _, err := store.Begin(ctx, "ns/b", "m1", owner, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := store.StartAttempt(ctx, "ns/b", "m1", owner); err != nil {
			t.Fatal(err)
		}
		_ = store.Release(ctx, "ns/b", "m1", owner)
	}
	pub := &fakePub{l: l}
	c := &fakeCaller{l: l}
	w := newWorker(l, store, c, pub, &sleeps)
	if got := w.Handle(ctx, msg(l, "m1")); got != DeadLettered || c.calls != 0 {
		t.Fatalf("Handle = %s calls = %d", got, c.calls)
	}
	if e := pub.out[0].Headers[queue.HeaderError]; !strings.Contains(e, "interrupted") {
		t.Fatalf("error = %q", e)
	}
}
