package affinity

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var poolA = route.PoolRef{Namespace: "ns", Name: "a"}

func TestMemoryTTLRefreshAndLRU(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := NewMemory(2, c.now)
	m.Pin(poolA, "k1", "pod-1", time.Minute)
	c.add(50 * time.Second)
	if got := m.Lookup(poolA, "k1", time.Minute); got != "pod-1" {
		t.Fatalf("lookup before expiry = %q", got)
	}
	c.add(50 * time.Second) // 100 s after the pin, 50 s after the refresh
	if got := m.Lookup(poolA, "k1", time.Minute); got != "pod-1" {
		t.Fatalf("lookup after refresh = %q, want the pin (TTL refreshed on use)", got)
	}
	c.add(61 * time.Second)
	if got := m.Lookup(poolA, "k1", time.Minute); got != "" {
		t.Fatalf("lookup after TTL = %q, want none", got)
	}
	m.Pin(poolA, "k1", "p1", time.Hour)
	m.Pin(poolA, "k2", "p2", time.Hour)
	m.Lookup(poolA, "k1", time.Hour) // k2 is now least recent
	m.Pin(poolA, "k3", "p3", time.Hour)
	if m.Len() != 2 || m.Lookup(poolA, "k2", time.Hour) != "" || m.Lookup(poolA, "k1", time.Hour) != "p1" {
		t.Fatalf("LRU kept the wrong pins (len %d)", m.Len())
	}
}

func TestMemoryActive(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := NewMemory(100, c.now)
	m.Pin(poolA, "k1", "p1", time.Hour)
	m.Pin(poolA, "k2", "p1", time.Hour)
	m.Pin(poolA, "k3", "p2", time.Hour)
	c.add(4 * time.Minute)
	m.Lookup(poolA, "k3", time.Hour)
	m.Pin(poolA, "k2", "p2", time.Hour) // re-pinned: counts on p2 only
	c.add(2 * time.Minute)              // k1 idle for 6 min
	got := m.Active(poolA)
	if got["p1"] != 0 || got["p2"] != 2 {
		t.Fatalf("active = %v, want p2:2 (k1 idle beyond 5 min)", got)
	}
}

func startRedis(t *testing.T) (*redistest.Server, redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rc.Close() })
	return srv, rc
}

// Two replicas share pins through Redis: a pin written by one is seen by the other, the TTL is
// refreshed on use, and session activity is counted once per session by its pinned pod.
func TestRedisSharedPins(t *testing.T) {
	_, rc := startRedis(t)
	ctx := context.Background()
	c := &clock{t: time.Now()}
	a := &Store{Mem: NewMemory(0, c.now), Redis: NewRedisTable(rc, "t1:"), Now: c.now}
	b := &Store{Mem: NewMemory(0, c.now), Redis: NewRedisTable(rc, "t1:"), Now: c.now}
	if got := b.Lookup(ctx, poolA, "k1", time.Minute); got != "" {
		t.Fatalf("lookup before any pin = %q", got)
	}
	a.Pin(ctx, poolA, "k1", "pod-1", 2*time.Second)
	if got := b.Lookup(ctx, poolA, "k1", time.Minute); got != "pod-1" {
		t.Fatalf("replica b sees %q, want pod-1", got)
	}
	ttl := rc.PTTL(ctx, "t1:pin:{ns/a}:k1").Val()
	if ttl < 50*time.Second {
		t.Fatalf("pin TTL after lookup = %v, want refreshed to about 1 min", ttl)
	}
	a.Pin(ctx, poolA, "k2", "pod-1", time.Minute)
	b.Pin(ctx, poolA, "k2", "pod-2", time.Minute) // re-pin moves the session's activity
	counts, shared := a.Active(ctx, poolA, []string{"pod-1", "pod-2"})
	if !shared || counts["pod-1"] != 1 || counts["pod-2"] != 1 {
		t.Fatalf("active = %v shared=%v, want pod-1:1 pod-2:1 shared", counts, shared)
	}
}

// With Redis down, lookups fall back to memory without error, pins made meanwhile are written
// back when Redis returns, and the breaker keeps an outage from costing each request a timeout.
func TestRedisOutageFallbackAndWriteBack(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	var errs int
	var mu sync.Mutex
	s := &Store{Mem: NewMemory(0, nil), Redis: NewRedisTable(rc, "t2:"), RetryAfter: 100 * time.Millisecond,
		OnError: func(string, error) { mu.Lock(); errs++; mu.Unlock() }}
	s.Pin(ctx, poolA, "before", "pod-1", time.Minute)
	srv.Kill()
	if got := s.Lookup(ctx, poolA, "before", time.Minute); got != "pod-1" {
		t.Fatalf("lookup with Redis down = %q, want pod-1 from memory", got)
	}
	s.Pin(ctx, poolA, "during", "pod-2", time.Minute)
	if s.Shared() {
		t.Fatal("Shared() with Redis down")
	}
	start := time.Now()
	for i := 0; i < 100; i++ {
		s.Lookup(ctx, poolA, "during", time.Minute)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("100 lookups during the outage took %v: the breaker should skip Redis", d)
	}
	if s.Dirty() != 1 {
		t.Fatalf("dirty pins = %d, want 1", s.Dirty())
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Flush(ctx) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := rc.Get(ctx, "t2:pin:{ns/a}:during").Val(); got != "pod-2" {
		t.Fatalf("pin in Redis after recovery = %q, want pod-2 written back", got)
	}
	if s.Dirty() != 0 {
		t.Fatalf("dirty after write-back = %d", s.Dirty())
	}
	mu.Lock()
	defer mu.Unlock()
	if errs == 0 {
		t.Fatal("no Redis error was reported during the outage")
	}
}

// The activity table holds at most the table's bound of sessions, dropping the least recent,
// and drops expired activity as new activity comes, without anyone counting.
func TestMemoryActivityBounded(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := NewMemory(3, c.now)
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		m.Pin(poolA, k, "p1", time.Hour)
	}
	if got := m.Active(poolA); got["p1"] != 3 {
		t.Fatalf("active = %v, want p1:3 (the bound)", got)
	}
	c.add(6 * time.Minute)
	m.Pin(poolA, "k6", "p2", time.Hour)
	if n := m.activeLen(); n != 1 {
		t.Fatalf("activity held after the window = %d, want 1 (expired dropped on write)", n)
	}
	if got := m.Active(poolA); len(got) != 1 || got["p2"] != 1 {
		t.Fatalf("active = %v, want p2:1", got)
	}
}

// A pod's activity set is trimmed on every write: sessions beyond MaxActive and those older than
// the window go even when nobody counts the pod's sessions.
func TestRedisActivityTrimmedOnWrite(t *testing.T) {
	_, rc := startRedis(t)
	ctx := context.Background()
	r := NewRedisTable(rc, "t3:")
	r.MaxActive = 3
	now := time.Now()
	act := "t3:act:{ns/a}:pod-1"
	if err := r.Pin(ctx, poolA, "old", "pod-1", time.Hour, now.Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"k1", "k2", "k3", "k4"} {
		if err := r.Pin(ctx, poolA, k, "pod-1", time.Hour, now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	got := rc.ZRange(ctx, act, 0, -1).Val()
	if len(got) != 3 || got[0] != "k2" || got[2] != "k4" {
		t.Fatalf("activity set = %v, want the 3 most recent [k2 k3 k4]", got)
	}
	if _, err := r.Lookup(ctx, poolA, "k1", time.Hour, now.Add(5*time.Second), ""); err != nil {
		t.Fatal(err)
	}
	if got := rc.ZRange(ctx, act, 0, -1).Val(); len(got) != 3 || got[2] != "k1" {
		t.Fatalf("activity set after a lookup = %v, want k1 most recent within 3", got)
	}
}

// Every key the pin scripts touch is passed in KEYS, whether the caller's expected pod is right,
// wrong or unknown, and when a session moves.
func TestRedisScriptsDeclareKeys(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	w := redistest.WatchScriptKeys(t, srv.Addr)
	r := NewRedisTable(rc, "t4:")
	now := time.Now()
	steps := []func() error{
		func() error { return r.Pin(ctx, poolA, "h", "pod-1", time.Minute, now) },
		func() error { _, err := r.Lookup(ctx, poolA, "h", time.Minute, now, "pod-1"); return err },
		func() error { _, err := r.Lookup(ctx, poolA, "h", time.Minute, now, "pod-9"); return err },
		func() error { _, err := r.Lookup(ctx, poolA, "h", time.Minute, now, ""); return err },
		func() error { return r.Pin(ctx, poolA, "h", "pod-2", time.Minute, now) },
		func() error { _, err := r.Active(ctx, poolA, []string{"pod-1", "pod-2"}, now); return err },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if got := rc.ZRange(ctx, "t4:act:{ns/a}:pod-1", 0, -1).Val(); len(got) != 0 {
		t.Fatalf("pod-1 still holds the moved session: %v", got)
	}
	w.Check(t, func() error { return rc.Ping(ctx).Err() })
}
