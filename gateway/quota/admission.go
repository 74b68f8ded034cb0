package quota

import (
	"container/list"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// Admission bounds the requests one gateway replica has in flight to each pool and queues the
// rest by priority. When the queue is full, a newcomer displaces the lowest-priority, newest
// waiter of lower priority than its own, or is refused itself: low priority is shed first.
type Admission struct {
	mu    sync.Mutex
	pools map[route.PoolRef]*poolQueue
}

type poolQueue struct {
	capacity int
	inflight int
	waiting  [route.PriorityHigh + 1]*list.List // of *waiter, oldest first
	n        int
}

type waiter struct {
	ch   chan *openai.Error // nil: admitted
	prio route.Priority
}

// Limits are a pool's admission settings.
type Limits struct {
	// Capacity is the in-flight bound (ready endpoints × max in flight per endpoint).
	Capacity int
	// MaxQueue bounds the waiters.
	MaxQueue int
	// Timeout bounds one wait.
	Timeout time.Duration
}

// NewAdmission returns an empty admission controller.
func NewAdmission() *Admission { return &Admission{pools: map[route.PoolRef]*poolQueue{}} }

func (a *Admission) queue(pool route.PoolRef) *poolQueue {
	q := a.pools[pool]
	if q == nil {
		q = &poolQueue{}
		for i := range q.waiting {
			q.waiting[i] = list.New()
		}
		a.pools[pool] = q
	}
	return q
}

// Ticket is an admitted request's slot; Done frees it (idempotent).
type Ticket struct {
	a    *Admission
	pool route.PoolRef
	once sync.Once
	// Waited is how long the request queued.
	Waited time.Duration
}

// Enter admits a request of priority prio to pool, waiting in the queue when the pool is at
// capacity. The error is a 503 with Retry-After when the request is shed or times out.
func (a *Admission) Enter(ctx context.Context, pool route.PoolRef, lim Limits, prio route.Priority) (*Ticket, *openai.Error) {
	start := time.Now()
	a.mu.Lock()
	q := a.queue(pool)
	q.capacity = lim.Capacity
	a.drain(q)
	if q.inflight < q.capacity && q.n == 0 {
		q.inflight++
		a.mu.Unlock()
		return &Ticket{a: a, pool: pool}, nil
	}
	if q.n >= lim.MaxQueue && !q.shedBelow(prio) {
		a.mu.Unlock()
		return nil, overloaded(pool, "pool is at capacity and its queue is full")
	}
	w := &waiter{ch: make(chan *openai.Error, 1), prio: prio}
	el := q.waiting[prio].PushBack(w)
	q.n++
	a.mu.Unlock()

	timeout := lim.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case e := <-w.ch:
		if e != nil {
			return nil, e
		}
		return &Ticket{a: a, pool: pool, Waited: time.Since(start)}, nil
	case <-t.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case e := <-w.ch: // decided while the timer fired
		if e != nil {
			return nil, e
		}
		return &Ticket{a: a, pool: pool, Waited: time.Since(start)}, nil
	default:
	}
	q.waiting[prio].Remove(el)
	q.n--
	if ctx.Err() != nil {
		return nil, openai.NewError(499, "cancelled", "client_closed", "", "client closed the request while it was queued")
	}
	return nil, overloaded(pool, "timed out waiting for capacity")
}

// shedBelow refuses the newest waiter of the lowest priority below prio; false when none.
func (q *poolQueue) shedBelow(prio route.Priority) bool {
	for p := route.PriorityLow; p < prio; p++ {
		if back := q.waiting[p].Back(); back != nil {
			q.waiting[p].Remove(back)
			q.n--
			back.Value.(*waiter).ch <- overloaded(route.PoolRef{}, "shed for higher-priority requests")
			return true
		}
	}
	return false
}

// drain admits waiters, highest priority first, while there is capacity; a.mu is held.
func (a *Admission) drain(q *poolQueue) {
	for q.inflight < q.capacity && q.n > 0 {
		for p := route.PriorityHigh; p >= route.PriorityLow; p-- {
			if front := q.waiting[p].Front(); front != nil {
				q.waiting[p].Remove(front)
				q.n--
				q.inflight++
				front.Value.(*waiter).ch <- nil
				break
			}
		}
	}
}

// Done frees the ticket's slot and admits the next waiter.
func (t *Ticket) Done() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		a := t.a
		a.mu.Lock()
		defer a.mu.Unlock()
		q := a.queue(t.pool)
		q.inflight--
		a.drain(q)
		if q.inflight == 0 && q.n == 0 {
			delete(a.pools, t.pool)
		}
	})
}

// Resize sets pool's capacity (its ready endpoints changed) and admits waiters that now fit.
func (a *Admission) Resize(pool route.PoolRef, capacity int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if q, ok := a.pools[pool]; ok {
		q.capacity = capacity
		a.drain(q)
	}
}

// Queued returns the waiters of pool by priority.
func (a *Admission) Queued(pool route.PoolRef) map[route.Priority]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[route.Priority]int{}
	if q, ok := a.pools[pool]; ok {
		for p, l := range q.waiting {
			if l.Len() > 0 {
				out[route.Priority(p)] = l.Len()
			}
		}
	}
	return out
}

func overloaded(pool route.PoolRef, why string) *openai.Error {
	msg := why
	if pool.Name != "" {
		msg = "pool " + pool.String() + ": " + why
	}
	e := openai.NewError(http.StatusServiceUnavailable, "service_unavailable", "overloaded", "", "%s", msg)
	e.RetryAfter = time.Second
	return e
}

// InFlight returns the admitted requests of pool not yet done.
func (a *Admission) InFlight(pool route.PoolRef) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if q, ok := a.pools[pool]; ok {
		return q.inflight
	}
	return 0
}
