package redisacl

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/rollout"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/redisconn"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// TestACLRulesServeTheGatewayOnly runs every Redis operation of the gateway
// (pins, activity, quota admission, settlement and lease refresh, rollout
// assignments, scripts reloaded after SCRIPT FLUSH) as a user with
// ACLRules, and checks the same user is refused another prefix's keys, KEYS,
// FLUSHALL and CONFIG.
func TestACLRulesServeTheGatewayOnly(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	const prefix = "nn:gw:"
	if err := redisconn.SetUser(ctx, admin, DefaultUser, "pw", ACLRules(prefix)); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: DefaultUser, Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })

	now := time.Now()
	pool := route.PoolRef{Namespace: "team-a", Name: "p"}
	pins := affinity.NewRedisTable(c, prefix)
	q := quota.NewRedis(c, prefix)
	ro := &rollout.RedisStore{Client: c, TTL: time.Minute, Prefix: prefix + RolloutPrefix}
	k := quota.Keys{Scope: "team-a|p"}
	spec := quota.Spec{ReqRate: 10, ReqBurst: 10, TokRate: 100, TokBurst: 100, MaxConcurrent: 2}
	for round := 0; round < 2; round++ {
		steps := []struct {
			name string
			run  func() error
		}{
			{"ping", func() error { return pins.Ping(ctx) }},
			{"pin", func() error { return pins.Pin(ctx, pool, "h", "pod-1", time.Minute, now) }},
			{"lookup", func() error { _, err := pins.Lookup(ctx, pool, "h", time.Minute, now, "pod-1"); return err }},
			{"lookup, pod unknown", func() error { _, err := pins.Lookup(ctx, pool, "h", time.Minute, now, ""); return err }},
			{"re-pin", func() error { return pins.Pin(ctx, pool, "h", "pod-2", time.Minute, now) }},
			{"pin back", func() error { return pins.Pin(ctx, pool, "h", "pod-1", time.Minute, now) }},
			{"active", func() error { _, err := pins.Active(ctx, pool, []string{"pod-1"}, now); return err }},
			{"admit", func() error { _, err := q.Admit(ctx, k, spec, 1, "l1", now.Add(time.Minute), now); return err }},
			{"settle", func() error { return q.Settle(ctx, k, spec, 1, "l1", now) }},
			{"refresh", func() error { return q.Refresh(ctx, map[quota.Keys][]string{k: {"l1"}}, now.Add(time.Minute)) }},
			{"assign", func() error { _, err := ro.Assign(ctx, "run:s", "canary"); return err }},
			{"get assignment", func() error { _, _, err := ro.Get(ctx, "run:s"); return err }},
		}
		for _, s := range steps {
			if err := s.run(); err != nil {
				t.Fatalf("round %d: %s as the gateway's user: %v", round, s.name, err)
			}
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil { // the second round reloads the scripts
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]any{
		{"GET", "nn:dispatch:msg:{a}:1"}, {"GET", "nn:{team-a}:sess:c"}, {"KEYS", "*"},
		{"FLUSHALL"}, {"CONFIG", "GET", "*"}, {"ACL", "LIST"}, {"SUBSCRIBE", "nn:{team-a}:inval"},
	} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the gateway's user = %v, want NOPERM", cmd, err)
		}
	}
}
