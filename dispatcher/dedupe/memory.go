package dedupe

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Memory is an in-process Store with the same semantics as Redis, for unit tests and
// single-process experiments (it is not shared between replicas). Now is the clock.
type Memory struct {
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu       sync.Mutex
	recs     map[string]*memRec
	counters map[string]map[string]int64
}

type memRec struct {
	state            State
	owner            string
	lease, expires   time.Time
	failures, starts int
	err              string
	outcome, meta    []byte
	saved            time.Time
}

func (m *Memory) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *Memory) rec(binding, id string, create bool) *memRec {
	if m.recs == nil {
		m.recs = map[string]*memRec{}
	}
	k := binding + "\x00" + id
	r := m.recs[k]
	if r != nil && !r.expires.IsZero() && !m.now().Before(r.expires) {
		delete(m.recs, k)
		r = nil
	}
	if r == nil && create {
		r = &memRec{}
		m.recs[k] = r
	}
	return r
}

// Begin implements Store.
func (m *Memory) Begin(_ context.Context, binding, id, owner string, lease, ttl time.Duration) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, now := m.rec(binding, id, true), m.now()
	if r.state == Done || r.state == Dead {
		return Record{State: r.state}, nil
	}
	if r.owner != "" && r.owner != owner && r.lease.After(now) {
		return Record{State: Busy, Wait: r.lease.Sub(now)}, nil
	}
	r.owner, r.lease, r.expires = owner, now.Add(lease), now.Add(max(ttl, lease))
	rec := Record{Failures: r.failures, Starts: r.starts, LastError: r.err}
	if r.state == Result || r.state == DeadPending {
		rec.State, rec.Outcome, rec.Meta, rec.Saved = r.state, r.outcome, r.meta, r.saved
		return rec, nil
	}
	r.state, rec.State = "processing", Acquired
	return rec, nil
}

func (m *Memory) fenced(what, binding, id, owner string) (*memRec, error) {
	r := m.rec(binding, id, false)
	if r == nil || r.owner != owner || r.lease.Before(m.now()) {
		return nil, fmt.Errorf("dedupe %s %s %s: %w", what, binding, id, ErrLeaseLost)
	}
	return r, nil
}

// StartAttempt implements Store.
func (m *Memory) StartAttempt(_ context.Context, binding, id, owner string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.fenced("start", binding, id, owner)
	if err != nil {
		return 0, err
	}
	r.starts++
	return r.starts, nil
}

// Renew implements Store.
func (m *Memory) Renew(_ context.Context, binding, id, owner string, lease time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.fenced("renew", binding, id, owner)
	if err != nil {
		return err
	}
	r.lease = m.now().Add(lease)
	return nil
}

// Fail implements Store.
func (m *Memory) Fail(_ context.Context, binding, id, owner, msg string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.fenced("fail", binding, id, owner)
	if err != nil {
		return 0, err
	}
	r.failures++
	r.err = msg
	return r.failures, nil
}

// SaveOutcome implements Store.
func (m *Memory) SaveOutcome(_ context.Context, binding, id, owner string, state State, outcome, meta []byte) error {
	if state != Result && state != DeadPending {
		return fmt.Errorf("dedupe save %s %s: state %q is not an outcome", binding, id, state)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.fenced("save", binding, id, owner)
	if err != nil {
		return err
	}
	r.state, r.outcome, r.meta, r.saved = state, append([]byte(nil), outcome...), append([]byte(nil), meta...), m.now()
	return nil
}

// Finish implements Store.
func (m *Memory) Finish(_ context.Context, binding, id, owner string, state State, ttl time.Duration) error {
	if state != Done && state != Dead {
		return fmt.Errorf("dedupe finish %s %s: state %q is not final", binding, id, state)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.fenced("finish", binding, id, owner)
	if err != nil {
		return err
	}
	r.state, r.owner, r.lease, r.outcome, r.meta, r.expires = state, "", time.Time{}, nil, nil, m.now().Add(ttl)
	return nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, binding, id, owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.rec(binding, id, false); r != nil && r.owner == owner {
		r.owner, r.lease = "", time.Time{}
	}
	return nil
}

// Count implements Store.
func (m *Memory) Count(_ context.Context, binding string, deltas map[string]int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counters == nil {
		m.counters = map[string]map[string]int64{}
	}
	c := m.counters[binding]
	if c == nil {
		c = map[string]int64{}
		m.counters[binding] = c
	}
	for k, d := range deltas {
		c[k] += d
	}
	return nil
}

// Counters implements Store.
func (m *Memory) Counters(_ context.Context, binding string) (map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for k, v := range m.counters[binding] {
		out[k] = v
	}
	return out, nil
}
