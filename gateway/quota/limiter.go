package quota

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// LeaseTTL is how long a concurrency lease lives without refresh; a gateway that dies holding
// leases frees them after at most this long.
const LeaseTTL = 30 * time.Second

// Limiter applies tenants' quotas through a Store.
type Limiter struct {
	// Store keeps the state (required).
	Store Store
	// FailOpen admits requests when the store fails; otherwise they get 503.
	FailOpen bool
	// Timeout bounds one store call (default 100 ms).
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnStoreError is called with every store error (for metrics); optional.
	OnStoreError func(err error)

	seq    atomic.Uint64
	prefix string
	mu     sync.Mutex
	active map[Keys]map[string]bool
}

func (l *Limiter) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Limiter) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout
	}
	return 100 * time.Millisecond
}

// SpecOf converts a tenant quota into store units.
func SpecOf(q access.Quota) Spec {
	s := Spec{ReqRate: q.RequestsPerMinute / 60, ReqBurst: q.RequestBurst, TokRate: q.TokensPerMinute / 60,
		TokBurst: q.TokenBurst, MaxConcurrent: q.MaxConcurrent}
	if s.ReqBurst <= 0 {
		s.ReqBurst = q.RequestsPerMinute
	}
	if s.TokBurst <= 0 {
		s.TokBurst = q.TokensPerMinute
	}
	return s
}

// Grant is an admitted request's hold on its quota. Settle must be called once when the request
// ends.
type Grant struct {
	l       *Limiter
	keys    Keys
	spec    Spec
	charged float64
	lease   string
	done    atomic.Bool
}

// Admit charges one request and tokens estimated tokens to tenant in pool. A refusal is a 429
// with Retry-After; a store failure is admitted (fail open) or a 503 (fail closed).
func (l *Limiter) Admit(ctx context.Context, tenant, pool string, q access.Quota, tokens int) (*Grant, *openai.Error) {
	g := &Grant{l: l, keys: Keys{Scope: tenant + "|" + pool}, spec: SpecOf(q), charged: float64(tokens)}
	if q.Unlimited() {
		g.done.Store(true)
		return g, nil
	}
	if g.spec.MaxConcurrent > 0 {
		g.lease = l.leaseID()
	}
	now := l.now()
	cctx, cancel := context.WithTimeout(ctx, l.timeout())
	res, err := l.Store.Admit(cctx, g.keys, g.spec, g.charged, g.lease, now.Add(LeaseTTL), now)
	cancel()
	if err != nil {
		if l.OnStoreError != nil {
			l.OnStoreError(err)
		}
		klog.FromContext(ctx).V(1).Info("Quota store failed", "failOpen", l.FailOpen, "err", err)
		if l.FailOpen {
			g.done.Store(true)
			return g, nil
		}
		e := openai.NewError(http.StatusServiceUnavailable, "service_unavailable", "quota_store", "",
			"quota service unavailable; retry later")
		e.RetryAfter = time.Second
		return nil, e
	}
	if !res.OK {
		e := openai.NewError(http.StatusTooManyRequests, "rate_limit_exceeded", "quota_"+res.Reason, "",
			"%s", refusal(res.Reason, g.spec))
		e.RetryAfter = res.Wait
		return nil, e
	}
	if g.lease != "" {
		l.track(g.keys, g.lease, true)
	}
	return g, nil
}

func refusal(reason string, s Spec) string {
	switch reason {
	case "requests":
		return "request rate limit reached (" + strconv.FormatFloat(s.ReqRate*60, 'f', -1, 64) + " requests per minute)"
	case "tokens":
		return "token rate limit reached (" + strconv.FormatFloat(s.TokRate*60, 'f', -1, 64) + " tokens per minute)"
	}
	return "concurrency limit reached (" + strconv.Itoa(s.MaxConcurrent) + " requests in flight)"
}

func (l *Limiter) leaseID() string {
	l.mu.Lock()
	if l.prefix == "" {
		l.prefix = strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	}
	p := l.prefix
	l.mu.Unlock()
	return p + strconv.FormatUint(l.seq.Add(1), 36)
}

func (l *Limiter) track(k Keys, lease string, add bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active == nil {
		l.active = map[Keys]map[string]bool{}
	}
	if add {
		if l.active[k] == nil {
			l.active[k] = map[string]bool{}
		}
		l.active[k][lease] = true
		return
	}
	delete(l.active[k], lease)
	if len(l.active[k]) == 0 {
		delete(l.active, k)
	}
}

// Settle ends the grant: the lease is released and the token bucket corrected by the difference
// between the estimate and the billed tokens (billed < 0: no usage known, no correction).
func (g *Grant) Settle(ctx context.Context, billed int) {
	if g == nil || !g.done.CompareAndSwap(false, true) {
		return
	}
	l := g.l
	if g.lease != "" {
		l.track(g.keys, g.lease, false)
	}
	delta := 0.0
	if billed >= 0 {
		delta = g.charged - float64(billed)
	}
	// The request is over: the correction must land even if the client's context ended.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout())
	defer cancel()
	if err := l.Store.Settle(cctx, g.keys, g.spec, delta, g.lease, l.now()); err != nil {
		if l.OnStoreError != nil {
			l.OnStoreError(err)
		}
		klog.FromContext(ctx).V(1).Info("Quota settle failed", "err", err)
	}
}

// Run refreshes the leases of requests in flight every LeaseTTL/3 until ctx ends.
func (l *Limiter) Run(ctx context.Context) {
	t := time.NewTicker(LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.refresh(ctx)
		}
	}
}

func (l *Limiter) refresh(ctx context.Context) {
	l.mu.Lock()
	batch := make(map[Keys][]string, len(l.active))
	for k, ids := range l.active {
		for id := range ids {
			batch[k] = append(batch[k], id)
		}
	}
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*l.timeout())
	defer cancel()
	if err := l.Store.Refresh(cctx, batch, l.now().Add(LeaseTTL)); err != nil {
		if l.OnStoreError != nil {
			l.OnStoreError(err)
		}
		klog.FromContext(ctx).V(1).Info("Quota lease refresh failed", "err", err)
	}
}
