package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestBucketTakeRefillAndWait(t *testing.T) {
	const rate, burst = 10.0, 100.0 // 10 tokens/s, 100 max
	b := Bucket{}
	steps := []struct {
		at       time.Duration
		cost     float64
		ok       bool
		wait     time.Duration
		levelNow float64
	}{
		{0, 60, true, 0, 40},                // starts full
		{0, 60, false, 2 * time.Second, 40}, // lacks 20 tokens: 2 s
		{2 * time.Second, 60, true, 0, 0},   // refilled to 60
		{2 * time.Second, 1, false, 100 * time.Millisecond, 0},
		{30 * time.Second, 250, true, 0, -150}, // above burst: needs a full bucket, leaves debt
		{31 * time.Second, 1, false, 14100 * time.Millisecond, -140},
	}
	for i, s := range steps {
		var ok bool
		var wait time.Duration
		b, ok, wait = Take(b, rate, burst, s.cost, t0.Add(s.at))
		if ok != s.ok || wait != s.wait {
			t.Fatalf("step %d: ok=%v wait=%v, want %v %v", i, ok, wait, s.ok, s.wait)
		}
		if l := b.LevelAt(rate, burst, t0.Add(s.at)); l != s.levelNow {
			t.Fatalf("step %d: level %v, want %v", i, l, s.levelNow)
		}
	}
}

func TestBucketAdjust(t *testing.T) {
	b, _, _ := Take(Bucket{}, 1, 100, 90, t0)
	b = Adjust(b, 1, 100, 50, t0) // refund: 10 + 50
	if l := b.LevelAt(1, 100, t0); l != 60 {
		t.Fatalf("after refund %v", l)
	}
	b = Adjust(b, 1, 100, 500, t0) // capped at burst
	if l := b.LevelAt(1, 100, t0); l != 100 {
		t.Fatalf("refund not capped: %v", l)
	}
	b = Adjust(b, 1, 100, -130, t0) // usage above the estimate: debt
	if l := b.LevelAt(1, 100, t0); l != -30 {
		t.Fatalf("debit %v", l)
	}
}

// stores runs a test against the memory store and a real Redis.
func stores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { f(t, NewMemory()) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{})
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { rc.Close() })
		r := NewRedis(rc, "qt:")
		r.callerClock = true // the steps below run on the test's clock
		f(t, r)
	})
}

// The Redis store runs its buckets and leases on Redis' clock: a replica whose clock is an hour
// ahead gets no refill and cannot expire another replica's lease early.
func TestRedisStoreUsesRedisTime(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	s := NewRedis(rc, "qt:")
	ctx := context.Background()
	k := Keys{Scope: "ns/t|ns/p"}
	sp := Spec{ReqRate: 1.0 / 3600, ReqBurst: 1, MaxConcurrent: 1}
	now := time.Now()
	if res, err := s.Admit(ctx, k, sp, 0, "a", now.Add(LeaseTTL), now); err != nil || !res.OK {
		t.Fatalf("first request: %+v %v", res, err)
	}
	ahead := now.Add(time.Hour)
	res, err := s.Admit(ctx, k, Spec{ReqRate: sp.ReqRate, ReqBurst: 1}, 0, "", ahead.Add(LeaseTTL), ahead)
	if err != nil || res.OK || res.Reason != "requests" {
		t.Fatalf("replica an hour ahead: %+v %v, want refused on requests (no refill on Redis' clock)", res, err)
	}
	res, err = s.Admit(ctx, Keys{Scope: k.Scope}, Spec{MaxConcurrent: 1}, 0, "b", ahead.Add(LeaseTTL), ahead)
	if err != nil || res.OK || res.Reason != "concurrency" {
		t.Fatalf("replica an hour ahead: %+v %v, want lease a still held", res, err)
	}
	exp := rc.ZScore(ctx, "qt:q:{ns/t|ns/p}:c", "a").Val()
	if d := time.Duration(exp)*time.Millisecond - time.Duration(now.UnixMilli())*time.Millisecond; d < LeaseTTL-5*time.Second || d > LeaseTTL+5*time.Second {
		t.Fatalf("lease expiry %v after now, want about LeaseTTL %v", d, LeaseTTL)
	}
}

// Both stores apply the same rules.
func TestStoreAdmit(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		k := Keys{Scope: "ns/t|ns/p"}
		sp := Spec{ReqRate: 1, ReqBurst: 2, TokRate: 100, TokBurst: 1000, MaxConcurrent: 2}
		exp := t0.Add(LeaseTTL)
		type step struct {
			at     time.Duration
			cost   float64
			lease  string
			ok     bool
			reason string
			wait   time.Duration
		}
		for i, st := range []step{
			{0, 400, "l1", true, "", 0},
			{0, 400, "l2", true, "", 0},
			{0, 10, "l3", false, "concurrency", time.Second}, // 2 leases held
		} {
			res, err := s.Admit(ctx, k, sp, st.cost, st.lease, exp, t0.Add(st.at))
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != st.ok || res.Reason != st.reason || res.Wait != st.wait {
				t.Fatalf("step %d: %+v, want ok=%v %q %v", i, res, st.ok, st.reason, st.wait)
			}
		}
		// Releasing a lease with a refund of 300 tokens (billed 100 of 400).
		if err := s.Settle(ctx, k, sp, 300, "l1", t0); err != nil {
			t.Fatal(err)
		}
		// Request bucket empty (2 taken, refills 1/s): 1 s.
		res, _ := s.Admit(ctx, k, sp, 10, "l4", exp, t0)
		if res.OK || res.Reason != "requests" || res.Wait != time.Second {
			t.Fatalf("request bucket: %+v", res)
		}
		// After 1 s: one request token; tokens: 1000-800+300+100 = 600, so 700 lacks 100: 1 s.
		res, _ = s.Admit(ctx, k, sp, 700, "l4", exp, t0.Add(time.Second))
		if res.OK || res.Reason != "tokens" || res.Wait != time.Second {
			t.Fatalf("token bucket: %+v", res)
		}
		res, _ = s.Admit(ctx, k, sp, 600, "l4", exp, t0.Add(time.Second))
		if !res.OK {
			t.Fatalf("600 of 600 tokens refused: %+v", res)
		}
		// Leases expire: after LeaseTTL without refresh, l2 and l4 no longer count.
		res, _ = s.Admit(ctx, k, sp, 1, "l5", t0.Add(LeaseTTL+5*time.Second).Add(LeaseTTL), t0.Add(LeaseTTL+5*time.Second))
		if !res.OK {
			t.Fatalf("expired leases still count: %+v", res)
		}
		// Refresh keeps a lease alive.
		if err := s.Refresh(ctx, map[Keys][]string{k: {"l5"}}, t0.Add(10*time.Minute)); err != nil {
			t.Fatal(err)
		}
		res, _ = s.Admit(ctx, k, Spec{MaxConcurrent: 1}, 0, "l6", t0.Add(5*time.Minute), t0.Add(4*time.Minute))
		if res.OK || res.Reason != "concurrency" {
			t.Fatalf("refreshed lease not counted: %+v", res)
		}
	})
}

type failing struct{ Store }

func (failing) Admit(context.Context, Keys, Spec, float64, string, time.Time, time.Time) (Result, error) {
	return Result{}, errors.New("store down")
}

func TestLimiterFailModes(t *testing.T) {
	q := access.Quota{RequestsPerMinute: 60}
	for _, open := range []bool{true, false} {
		l := &Limiter{Store: failing{NewMemory()}, FailOpen: open}
		g, e := l.Admit(context.Background(), "t", "p", q, 10)
		if open && (e != nil || g == nil) {
			t.Fatalf("fail open refused: %v", e)
		}
		if !open && (e == nil || e.Status != 503 || e.RetryAfter <= 0) {
			t.Fatalf("fail closed: %v", e)
		}
	}
}

func TestLimiter429AndSettle(t *testing.T) {
	l := &Limiter{Store: NewMemory(), Now: func() time.Time { return t0 }}
	q := access.Quota{TokensPerMinute: 600, MaxConcurrent: 1} // 10 tokens/s, burst 600
	ctx := context.Background()
	g, e := l.Admit(ctx, "t", "p", q, 500)
	if e != nil {
		t.Fatal(e)
	}
	if _, e := l.Admit(ctx, "t", "p", q, 1); e == nil || e.Status != 429 || e.Reason != "quota_concurrency" {
		t.Fatalf("second concurrent request: %v", e)
	}
	g.Settle(ctx, 100) // billed 100 of 500: 400 back, lease released
	g.Settle(ctx, 100) // idempotent
	g2, e := l.Admit(ctx, "t", "p", q, 500)
	if e != nil {
		t.Fatalf("after settle: %v", e)
	}
	g2.Settle(ctx, -1)
	_, e = l.Admit(ctx, "t", "p", q, 500)
	if e == nil || e.Status != 429 || e.Reason != "quota_tokens" || e.RetryAfter != 50*time.Second {
		t.Fatalf("token bucket: %v (retry %v)", e, e.RetryAfter)
	}
	if other, e := l.Admit(ctx, "other", "p", q, 500); e != nil || other == nil {
		t.Fatalf("another tenant refused: %v", e)
	}
}
