package quota

import (
	"context"
	"sync"
	"time"
)

// Spec is a quota in store units: rates per second.
type Spec struct {
	ReqRate, ReqBurst float64
	TokRate, TokBurst float64
	MaxConcurrent     int
}

// Keys name one tenant's quota state in one pool.
type Keys struct {
	// Scope is "<tenant>|<pool>"; the store derives its own keys from it.
	Scope string
}

// Result of an admission.
type Result struct {
	// OK is true when the request may proceed.
	OK bool
	// Reason is "requests", "tokens" or "concurrency" when refused.
	Reason string
	// Wait is when to retry.
	Wait time.Duration
}

// Store keeps quota state.
type Store interface {
	// Admit checks and takes, atomically: a concurrency lease (when MaxConcurrent > 0) valid
	// until leaseExpiry, one request and cost tokens.
	Admit(ctx context.Context, k Keys, s Spec, cost float64, lease string, leaseExpiry, now time.Time) (Result, error)
	// Settle releases the lease (when not "") and adds delta tokens (refund > 0, debit < 0).
	Settle(ctx context.Context, k Keys, s Spec, delta float64, lease string, now time.Time) error
	// Refresh extends the leases of scope to expiry.
	Refresh(ctx context.Context, leases map[Keys][]string, expiry time.Time) error
}

// Memory is a Store of one process.
type Memory struct {
	mu sync.Mutex
	m  map[string]*memState
}

type memState struct {
	req, tok Bucket
	leases   map[string]time.Time
	spec     Spec
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory { return &Memory{m: map[string]*memState{}} }

func (m *Memory) state(scope string, sp Spec, now time.Time) *memState {
	s := m.m[scope]
	if s == nil {
		s = &memState{leases: map[string]time.Time{}}
		m.m[scope] = s
		if len(m.m)%4096 == 0 {
			m.sweep(now)
		}
	}
	s.spec = sp
	return s
}

// sweep forgets scopes whose buckets are full and that hold no lease: they are the same as
// scopes never used.
func (m *Memory) sweep(now time.Time) {
	for k, s := range m.m {
		full := func(b Bucket, rate, burst float64) bool { return rate <= 0 || b.LevelAt(rate, burst, now) >= burst }
		if len(s.leases) == 0 && full(s.req, s.spec.ReqRate, s.spec.ReqBurst) && full(s.tok, s.spec.TokRate, s.spec.TokBurst) {
			delete(m.m, k)
		}
	}
}

// Admit implements Store.
func (m *Memory) Admit(_ context.Context, k Keys, s Spec, cost float64, lease string, leaseExpiry, now time.Time) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state(k.Scope, s, now)
	if s.MaxConcurrent > 0 {
		for id, exp := range st.leases {
			if !exp.After(now) {
				delete(st.leases, id)
			}
		}
		if len(st.leases) >= s.MaxConcurrent {
			return Result{Reason: "concurrency", Wait: time.Second}, nil
		}
	}
	req, tok := st.req, st.tok
	if s.ReqRate > 0 {
		var ok bool
		var wait time.Duration
		if req, ok, wait = Take(st.req, s.ReqRate, s.ReqBurst, 1, now); !ok {
			return Result{Reason: "requests", Wait: wait}, nil
		}
	}
	if s.TokRate > 0 {
		var ok bool
		var wait time.Duration
		if tok, ok, wait = Take(st.tok, s.TokRate, s.TokBurst, cost, now); !ok {
			return Result{Reason: "tokens", Wait: wait}, nil
		}
	}
	st.req, st.tok = req, tok
	if s.MaxConcurrent > 0 {
		st.leases[lease] = leaseExpiry
	}
	return Result{OK: true}, nil
}

// Settle implements Store.
func (m *Memory) Settle(_ context.Context, k Keys, s Spec, delta float64, lease string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state(k.Scope, s, now)
	if lease != "" {
		delete(st.leases, lease)
	}
	if s.TokRate > 0 && delta != 0 {
		st.tok = Adjust(st.tok, s.TokRate, s.TokBurst, delta, now)
	}
	return nil
}

// Refresh implements Store.
func (m *Memory) Refresh(_ context.Context, leases map[Keys][]string, expiry time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, ids := range leases {
		if st := m.m[k.Scope]; st != nil {
			for _, id := range ids {
				if _, ok := st.leases[id]; ok {
					st.leases[id] = expiry
				}
			}
		}
	}
	return nil
}
