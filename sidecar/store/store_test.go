package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func ring(t testing.TB, active string, seed byte, ids ...string) *keys.Ring {
	t.Helper()
	raw := map[string][]byte{}
	for i, id := range ids {
		raw[id] = bytes.Repeat([]byte{seed + byte(i)}, keys.KeySize)
	}
	r, err := keys.NewRing(active, raw)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newStore(t testing.TB, addr, tenant string, r *keys.Ring, o Options) *Store {
	t.Helper()
	c, err := frame.New(r, frame.Options{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	s, err := New(rdb, c, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCRUDAndErrors(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newStore(t, srv.Addr, "team-a", ring(t, "k1", 1, "k1"), Options{MaxSize: 1024})
	ctx := context.Background()

	v1, err := s.Put(ctx, "conv-1", []byte(`{"turns":[]}`), -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "conv-1")
	if err != nil || got.Version != v1 || string(got.Data) != `{"turns":[]}` || got.TTL != 24*time.Hour {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want error
	}{
		{"stale if-match", func() error { _, err := s.Put(ctx, "conv-1", []byte(`{}`), v1+100, 0); return err }, ErrConflict},
		{"create-only on existing", func() error { _, err := s.Put(ctx, "conv-1", []byte(`{}`), 0, 0); return err }, ErrConflict},
		{"oversize", func() error {
			_, err := s.Put(ctx, "c", []byte(`{"a":"`+string(make([]byte, 2000))+`"}`), -1, 0)
			return err
		}, ErrTooLarge},
		{"bad id", func() error { _, err := s.Get(ctx, "a:b"); return err }, ErrBadID},
		{"bad id braces", func() error { _, err := s.Put(ctx, "{team-b}", []byte(`{}`), -1, 0); return err }, ErrBadID},
		{"not object", func() error { _, err := s.Put(ctx, "c", []byte(`[1]`), -1, 0); return err }, ErrBadDocument},
		{"bad ttl", func() error { _, err := s.Put(ctx, "c", []byte(`{}`), -1, -time.Second); return err }, ErrBadDocument},
		{"missing", func() error { _, err := s.Get(ctx, "nope"); return err }, ErrNotFound},
		{"delete missing", func() error { return s.Delete(ctx, "nope", -1) }, ErrNotFound},
		{"delete stale", func() error { return s.Delete(ctx, "conv-1", v1+1) }, ErrConflict},
		{"append non-object", func() error { _, err := s.Append(ctx, "conv-1", []byte(`"x"`), 0); return err }, ErrBadDocument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	v2, err := s.Put(ctx, "conv-1", []byte(`{"n":2}`), v1, 0)
	if err != nil || v2 <= v1 {
		t.Fatalf("CAS put = %d, %v", v2, err)
	}
	if err := s.Delete(ctx, "conv-1", v2); err != nil {
		t.Fatal(err)
	}
	// Re-created sessions never reuse a version (no ABA for If-Match).
	v3, err := s.Put(ctx, "conv-1", []byte(`{}`), 0, 0)
	if err != nil || v3 <= v2 {
		t.Fatalf("re-create = %d, %v (previous %d)", v3, err, v2)
	}
}

func TestTTLExpiryAndRefreshOnRead(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		refresh bool
		near    int
		alive   bool
	}{
		{"expires without refresh", false, 0, false},
		{"refresh keeps it alive", true, 0, true},
		{"refresh via near cache keeps it alive", true, 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, srv.Addr, "ttl", ring(t, "k", 1, "k"), Options{RefreshOnRead: tc.refresh, NearCacheBytes: tc.near, NearCacheMaxAge: time.Hour})
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go s.Run(rctx, 50*time.Millisecond)
			id := fmt.Sprintf("t-%v-%d", tc.refresh, tc.near)
			if _, err := s.Put(ctx, id, []byte(`{}`), -1, 600*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			for range 8 { // 1.2 s of reads, twice the TTL
				time.Sleep(150 * time.Millisecond)
				if _, err := s.Get(ctx, id); err != nil && tc.alive {
					t.Fatalf("read while refreshed: %v", err)
				}
			}
			n, err := s.rdb.Exists(ctx, s.Key(id)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if (n == 1) != tc.alive {
				t.Fatalf("exists = %d after 1.2s with ttl 600ms, want alive=%v", n, tc.alive)
			}
			if tc.alive {
				time.Sleep(900 * time.Millisecond) // no reads: it must expire on its own TTL
				if _, err := newStore(t, srv.Addr, "ttl", ring(t, "k", 1, "k"), Options{}).Get(ctx, id); !errors.Is(err, ErrNotFound) {
					t.Fatalf("after idle TTL: %v, want ErrNotFound", err)
				}
			}
		})
	}
}

func TestTamperTenantIsolationAndRotation(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	a := newStore(t, srv.Addr, "ns-a", ring(t, "k1", 1, "k1"), Options{})
	b := newStore(t, srv.Addr, "ns-b", ring(t, "k1", 9, "k1"), Options{})
	if _, err := b.Put(ctx, "shared-id", []byte(`{"secret":"b"}`), -1, 0); err != nil {
		t.Fatal(err)
	}
	// A names the same conversation id but can only reach its own namespace.
	if _, err := a.Get(ctx, "shared-id"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("A read B's session: %v", err)
	}
	// Even B's ciphertext copied into A's key does not open with A's key.
	raw, err := b.rdb.HGetAll(ctx, b.Key("shared-id")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.rdb.HSet(ctx, a.Key("shared-id"), raw).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, "shared-id"); !errors.Is(err, frame.ErrAuth) {
		t.Fatalf("A opened B's frame: %v, want ErrAuth", err)
	}
	// A flipped ciphertext bit is an error, never an empty session.
	if _, err := a.Put(ctx, "c1", []byte(`{"x":1}`), -1, 0); err != nil {
		t.Fatal(err)
	}
	d, _ := a.rdb.HGet(ctx, a.Key("c1"), "d").Bytes()
	d[len(d)-3] ^= 0x10
	a.rdb.HSet(ctx, a.Key("c1"), "d", d)
	if got, err := a.Get(ctx, "c1"); !errors.Is(err, frame.ErrAuth) || got != nil {
		t.Fatalf("tampered Get = %v, %v; want ErrAuth", got, err)
	}
	// Rotation: old ciphertexts readable, new writes use the new key.
	if _, err := a.Put(ctx, "c2", []byte(`{"old":true}`), -1, 0); err != nil {
		t.Fatal(err)
	}
	a.codec.SetRing(ring(t, "k2", 1, "k1", "k2"))
	if got, err := a.Get(ctx, "c2"); err != nil || string(got.Data) != `{"old":true}` {
		t.Fatalf("old frame after rotation: %v", err)
	}
	if _, err := a.Put(ctx, "c3", []byte(`{"new":true}`), -1, 0); err != nil {
		t.Fatal(err)
	}
	f, _ := a.rdb.HGet(ctx, a.Key("c3"), "d").Bytes()
	if id, err := frame.KeyID(f); err != nil || id != "k2" {
		t.Fatalf("new write key id = %q, %v; want k2", id, err)
	}
	if _, err := a.Get(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAppendsLoseNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	const workers, each = 8, 20
	stores := []*Store{
		newStore(t, srv.Addr, "app", ring(t, "k", 1, "k"), Options{}),
		newStore(t, srv.Addr, "app", ring(t, "k", 1, "k"), Options{NearCacheBytes: 1 << 20}),
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go stores[1].Run(rctx, time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				turn := fmt.Sprintf(`{"role":"user","content":"w%d-%d"}`, w, i)
				if _, err := stores[w%2].Append(ctx, "race", []byte(turn), 0); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := stores[0].Get(ctx, "race")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Turns []struct{ Content string } }
	if err := json.Unmarshal(got.Data, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tr := range doc.Turns {
		seen[tr.Content] = true
	}
	if len(doc.Turns) != workers*each || len(seen) != workers*each {
		t.Fatalf("turns = %d (distinct %d), want %d", len(doc.Turns), len(seen), workers*each)
	}
}

func TestNearCacheCoherence(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := &countObserver{}
	reader := newStore(t, srv.Addr, "nc", ring(t, "k", 1, "k"), Options{NearCacheBytes: 1 << 20, NearCacheMaxAge: time.Hour, Observer: obs})
	writer := newStore(t, srv.Addr, "nc", ring(t, "k", 1, "k"), Options{})
	go reader.Run(ctx, time.Second)
	waitFor(t, "near cache enabled", reader.near.enabled.Load)
	if _, err := writer.Put(ctx, "hot", []byte(`{"n":1}`), -1, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if g, err := reader.Get(ctx, "hot"); err != nil || string(g.Data) != `{"n":1}` {
			t.Fatalf("Get = %v, %v", g, err)
		}
	}
	if obs.hits() < 2 {
		t.Fatalf("near-cache hits = %d, want >= 2", obs.hits())
	}
	for n := 2; n <= 20; n++ {
		if _, err := writer.Put(ctx, "hot", fmt.Appendf(nil, `{"n":%d}`, n), -1, 0); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`{"n":%d}`, n)
		waitFor(t, "reader sees "+want, func() bool {
			g, err := reader.Get(ctx, "hot")
			return err == nil && string(g.Data) == want
		})
	}
	if err := writer.Delete(ctx, "hot", -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reader sees delete", func() bool {
		_, err := reader.Get(ctx, "hot")
		return errors.Is(err, ErrNotFound)
	})
	// Losing Redis turns the near cache off: no stale hits while invalidations cannot arrive.
	srv.Kill()
	waitFor(t, "near cache disabled", func() bool { return !reader.near.enabled.Load() })
	if _, err := reader.Get(ctx, "hot"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Get with redis down = %v, want ErrUnavailable", err)
	}
}

type countObserver struct {
	mu sync.Mutex
	h  int
}

func (o *countObserver) RedisCall(string, time.Duration, error) {}
func (o *countObserver) NearCacheLookup(hit bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if hit {
		o.h++
	}
}
func (o *countObserver) hits() int { o.mu.Lock(); defer o.mu.Unlock(); return o.h }

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
