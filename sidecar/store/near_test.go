package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// TestNearCacheHonoursRedisTTL checks that no near cache serves a session
// after Redis expired it, whether the entry came from the sidecar's own
// write or from a read of another sidecar's write; the near cache's own
// max age (an hour here) must not keep it alive.
func TestNearCacheHonoursRedisTTL(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name     string
		ownWrite bool
		refresh  bool
		ttl      time.Duration
	}{
		{"cached by its own write", true, false, 400 * time.Millisecond},
		{"cached by a read", false, false, 400 * time.Millisecond},
		// Refresh-on-read serves from the near cache only while the key
		// has more than the refresher's margin left (1.2 s here).
		{"cached by a read, refresh-on-read", false, true, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &countObserver{}
			near := newStore(t, srv.Addr, "ttl-near", ring(t, "k", 1, "k"),
				Options{NearCacheBytes: 1 << 20, NearCacheMaxAge: time.Hour, RefreshOnRead: tc.refresh, Observer: obs})
			go near.Run(ctx, 50*time.Millisecond)
			waitFor(t, "near cache enabled", near.near.enabled.Load)
			writer := near
			if !tc.ownWrite {
				writer = newStore(t, srv.Addr, "ttl-near", ring(t, "k", 1, "k"), Options{})
			}
			id := strings.ReplaceAll(tc.name, " ", "-")
			id = strings.ReplaceAll(id, ",", "")
			ttl := tc.ttl
			if _, err := writer.Put(ctx, id, []byte(`{"n":1}`), -1, ttl); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := near.Get(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if obs.hits() == 0 {
				t.Fatal("no near-cache hit before expiry: the test would prove nothing")
			}
			if tc.refresh {
				// Reads refresh the TTL; stop reading and let it lapse.
				time.Sleep(ttl + 300*time.Millisecond)
			} else {
				time.Sleep(ttl + 50*time.Millisecond)
			}
			if n, err := near.rdb.Exists(ctx, near.Key(id)).Result(); err != nil || n != 0 {
				t.Fatalf("redis still has the key (%d, %v): the test would prove nothing", n, err)
			}
			if g, err := near.Get(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after the Redis TTL = %+v, %v; want ErrNotFound", g, err)
			}
		})
	}
}

// TestAppendAfterUnannouncedDelete checks that an Append whose near-cache
// entry names a version Redis no longer holds (the key was deleted or
// evicted without an invalidation message) drops the entry and succeeds
// on its retry, instead of retrying on the stale entry until it gives up.
func TestAppendAfterUnannouncedDelete(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStore(t, srv.Addr, "app-near", ring(t, "k", 1, "k"), Options{NearCacheBytes: 1 << 20, NearCacheMaxAge: time.Hour, AppendRetries: 5})
	go s.Run(ctx, time.Second)
	waitFor(t, "near cache enabled", s.near.enabled.Load)
	if _, err := s.Append(ctx, "c", []byte(`{"role":"user","content":"one"}`), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "c"); err != nil { // cached
		t.Fatal(err)
	}
	// As an eviction or an operator's DEL would: no version, no message.
	if err := s.rdb.Del(ctx, s.Key("c")).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v, err := s.Append(ctx, "c", []byte(`{"role":"user","content":"two"}`), 0)
	if err != nil {
		t.Fatalf("Append after an unannounced delete: %v (after %s)", err, time.Since(start))
	}
	got, err := newStore(t, srv.Addr, "app-near", ring(t, "k", 1, "k"), Options{}).Get(ctx, "c")
	if err != nil || got.Version != v || string(got.Data) != `{"turns":[{"role":"user","content":"two"}]}` {
		t.Fatalf("session after Append = %+v, %v; want only the new turn at version %d", got, err, v)
	}
}
