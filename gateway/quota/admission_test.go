package quota

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

var pa = route.PoolRef{Namespace: "ns", Name: "p"}

type entered struct {
	t   *Ticket
	err *openai.Error
}

func enter(a *Admission, lim Limits, prio route.Priority) chan entered {
	ch := make(chan entered, 1)
	go func() {
		t, err := a.Enter(context.Background(), pa, lim, prio)
		ch <- entered{t, err}
	}()
	return ch
}

func waitQueued(t *testing.T, a *Admission, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		total := 0
		for _, v := range a.Queued(pa) {
			total += v
		}
		if total == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("queue did not reach %d: %v", n, a.Queued(pa))
}

// Under overload the queue admits high priority first, and when it is full a newcomer sheds the
// newest waiter of the lowest lower priority; a newcomer with nothing below it is refused.
func TestAdmissionPriorityAndShedding(t *testing.T) {
	a := NewAdmission()
	lim := Limits{Capacity: 1, MaxQueue: 2, Timeout: 5 * time.Second}
	first, err := a.Enter(context.Background(), pa, lim, route.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	low := enter(a, lim, route.PriorityLow)
	waitQueued(t, a, 1)
	normal := enter(a, lim, route.PriorityNormal)
	waitQueued(t, a, 2)
	high := enter(a, lim, route.PriorityHigh) // queue full: sheds low
	if got := <-low; got.err == nil || got.err.Status != 503 || got.err.Reason != "overloaded" || got.err.RetryAfter <= 0 {
		t.Fatalf("low priority not shed: %+v", got.err)
	}
	waitQueued(t, a, 2)
	if _, err := a.Enter(context.Background(), pa, lim, route.PriorityLow); err == nil || err.Status != 503 {
		t.Fatalf("low newcomer into a full queue of higher priorities: %v", err)
	}
	first.Done()
	h := <-high
	if h.err != nil {
		t.Fatalf("high: %v", h.err)
	}
	select {
	case n := <-normal:
		t.Fatalf("normal admitted before high finished: %+v", n)
	case <-time.After(20 * time.Millisecond):
	}
	h.t.Done()
	n := <-normal
	if n.err != nil {
		t.Fatal(n.err)
	}
	if n.t.Waited <= 0 {
		t.Fatal("queued request reports no wait")
	}
	n.t.Done()
	n.t.Done() // idempotent
	if q := a.Queued(pa); len(q) != 0 {
		t.Fatalf("queue left: %v", q)
	}
}

func TestAdmissionTimeoutCancelAndResize(t *testing.T) {
	a := NewAdmission()
	lim := Limits{Capacity: 1, MaxQueue: 10, Timeout: 30 * time.Millisecond}
	hold, _ := a.Enter(context.Background(), pa, lim, route.PriorityNormal)
	if _, err := a.Enter(context.Background(), pa, lim, route.PriorityHigh); err == nil || err.Status != 503 {
		t.Fatalf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := a.Enter(ctx, pa, Limits{Capacity: 1, MaxQueue: 10, Timeout: time.Minute}, route.PriorityNormal); err == nil || err.Status != 499 {
			t.Errorf("cancelled wait: %v", err)
		}
	}()
	waitQueued(t, a, 1)
	cancel()
	wg.Wait()
	waitQueued(t, a, 0)
	// More endpoints: the waiter fits at once.
	ch := enter(a, Limits{Capacity: 1, MaxQueue: 10, Timeout: time.Minute}, route.PriorityNormal)
	waitQueued(t, a, 1)
	a.Resize(pa, 2)
	if got := <-ch; got.err != nil {
		t.Fatal(got.err)
	} else {
		got.t.Done()
	}
	hold.Done()
}
