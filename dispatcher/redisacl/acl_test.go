package redisacl

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neuronetes/neuronetes/dispatcher/binding"
	"github.com/neuronetes/neuronetes/dispatcher/dedupe"
	"github.com/neuronetes/neuronetes/dispatcher/toolproxy"
	"github.com/neuronetes/neuronetes/internal/redisconn"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// TestACLRulesServeTheDispatcherOnly runs every Redis operation of the
// dispatcher (a dedupe record's whole life, counters, the replica heartbeat
// and health exchange, the tool proxy's sealed answers, scripts reloaded after
// SCRIPT FLUSH) as a user with ACLRules, and checks the same user is refused
// another prefix's keys, KEYS, FLUSHALL and CONFIG.
func TestACLRulesServeTheDispatcherOnly(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	const prefix = "nn:dispatch:"
	if err := redisconn.SetUser(ctx, admin, DefaultUser, "pw", ACLRules(prefix)); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: DefaultUser, Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })

	st := dedupe.NewRedis(c, prefix)
	sealer, err := toolproxy.NewIdemSealer(bytes.Repeat([]byte{1}, toolproxy.IdemKeySize))
	if err != nil {
		t.Fatal(err)
	}
	idem := &toolproxy.RedisIdem{Client: c, Prefix: prefix, Sealer: sealer}
	const b, owner = "team-a/tb", "r1"
	for round, id := range []string{"m1", "m2"} {
		steps := []struct {
			name string
			run  func() error
		}{
			{"begin", func() error { _, err := st.Begin(ctx, b, id, owner, time.Minute, time.Hour); return err }},
			{"start", func() error { _, err := st.StartAttempt(ctx, b, id, owner); return err }},
			{"renew", func() error { return st.Renew(ctx, b, id, owner, time.Minute) }},
			{"fail", func() error { _, err := st.Fail(ctx, b, id, owner, "x"); return err }},
			{"save", func() error { return st.SaveOutcome(ctx, b, id, owner, dedupe.Result, []byte("o"), []byte("m")) }},
			{"finish", func() error { return st.Finish(ctx, b, id, owner, dedupe.Done, time.Hour) }},
			{"release", func() error { return st.Release(ctx, b, id, owner) }},
			{"count", func() error { return st.Count(ctx, b, map[string]int64{"done": 1}) }},
			{"counters", func() error { _, err := st.Counters(ctx, b); return err }},
			{"claim", func() error { _, err := idem.Claim(ctx, id, "args", time.Minute); return err }},
			{"store", func() error {
				return idem.Store(ctx, id, toolproxy.Answer{Status: 200, Body: []byte("a")}, time.Minute)
			}},
			{"abandon", func() error { return idem.Abandon(ctx, id+"-other") }},
		}
		for _, s := range steps {
			if err := s.run(); err != nil {
				t.Fatalf("round %d: %s as the dispatcher's user: %v", round, s.name, err)
			}
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "tb"}
	rep := &binding.Reporter{Redis: c, Prefix: prefix, Member: owner, Manager: &binding.Manager{},
		Tools: func() map[types.NamespacedName]binding.Health {
			return map[types.NamespacedName]binding.Health{key: {}}
		}}
	rep.Tick(ctx)
	for _, k := range []string{prefix + "peers", prefix + "health:{team-a/tb}"} {
		if n, err := admin.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("after a status tick as the dispatcher's user, %s exists = %d, %v; want 1", k, n, err)
		}
	}
	for _, cmd := range [][]any{
		{"GET", "nn:gw:pin:{a/p}:h"}, {"HGETALL", "nn:{team-a}:sess:c"}, {"KEYS", "*"},
		{"FLUSHALL"}, {"CONFIG", "GET", "*"}, {"ACL", "LIST"}, {"XADD", prefix + "s", "*", "f", "v"},
	} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the dispatcher's user = %v, want NOPERM", cmd, err)
		}
	}
}
