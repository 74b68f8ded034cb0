package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// aclClient is a client authenticated as user (password pw).
func aclClient(t *testing.T, addr, user, pw string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestACLRulesServeTheTenantOnly creates the Redis user of tenant a's
// sidecars with ACLRules: every store operation of tenant a works through it
// (CRUD, append, delete, blobs, scripts reloaded after SCRIPT FLUSH, the
// near cache's subscription), and the same user cannot touch tenant b's keys
// or channel, list keys or flush the database.
func TestACLRulesServeTheTenantOnly(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	args := []any{"ACL", "SETUSER", "sidecar-team-a", "reset", "on", ">pw-a"}
	for _, r := range ACLRules("team-a") {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	if err := admin.HSet(ctx, "nn:{team-b}:sess:c", "v", "1", "d", "x", "t", "1000").Err(); err != nil {
		t.Fatal(err)
	}
	r := ring(t, "k", 1, "k")
	codec := func(tenant string) *frame.Codec {
		c, err := frame.New(r, frame.Options{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, err := New(aclClient(t, srv.Addr, "sidecar-team-a", "pw-a"), codec("team-a"), Options{NearCacheBytes: 1 << 20, RefreshOnRead: true})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go a.Run(runCtx, time.Second)

	v1, err := a.Put(ctx, "c", []byte(`{"n":1}`), 0, 0)
	if err != nil {
		t.Fatalf("Put as the tenant's user: %v", err)
	}
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "c", []byte(`{"role":"user"}`), 0); err != nil {
		t.Fatalf("Append (scripts reloaded): %v", err)
	}
	if _, err := a.Get(ctx, "c"); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := a.Put(ctx, "c", []byte(`{}`), v1, 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale Put = %v, want ErrConflict", err)
	}
	if err := a.Delete(ctx, "c", -1); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	blobs := a.Blobs("emb")
	if err := blobs.PutBlob(ctx, "e", []byte("vec"), time.Minute); err != nil {
		t.Fatalf("PutBlob: %v", err)
	}
	if _, err := blobs.GetBlob(ctx, "e"); err != nil {
		t.Fatalf("GetBlob: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !a.near.enabled.Load() {
		if time.Now().After(deadline) {
			t.Fatal("near-cache subscription never went live under the tenant's user")
		}
		time.Sleep(20 * time.Millisecond)
	}

	asA := aclClient(t, srv.Addr, "sidecar-team-a", "pw-a")
	b, err := New(asA, codec("team-b"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"read tenant b's session", func() error { _, err := b.Get(ctx, "c"); return err }},
		{"write tenant b's session", func() error { _, err := b.Put(ctx, "c", []byte(`{}`), -1, 0); return err }},
		{"delete tenant b's session", func() error { return b.Delete(ctx, "c", -1) }},
		{"raw HGETALL of tenant b", func() error { return asA.HGetAll(ctx, "nn:{team-b}:sess:c").Err() }},
		{"subscribe to tenant b's channel", func() error {
			ps := asA.Subscribe(ctx, "nn:{team-b}:inval")
			defer ps.Close()
			_, err := ps.ReceiveTimeout(ctx, time.Second)
			return err
		}},
		{"KEYS", func() error { return asA.Keys(ctx, "*").Err() }},
		{"FLUSHALL", func() error { return asA.FlushAll(ctx).Err() }},
		{"CONFIG SET", func() error { return asA.ConfigSet(ctx, "appendonly", "no").Err() }},
	} {
		if err := tc.do(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s as tenant a's user: %v, want NOPERM", tc.name, err)
		}
	}
	if n, err := admin.Exists(ctx, "nn:{team-b}:sess:c").Result(); err != nil || n != 1 {
		t.Fatalf("tenant b's session after the attempts: exists=%d, %v", n, err)
	}
}
