package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/neuronetes/neuronetes/controller/redisusers"
	"github.com/neuronetes/neuronetes/internal/redisconn"
)

// redisUserOptions are the controller's own Redis connection (the sidecars' Redis,
// --sidecar-redis-addr) and whether it manages the namespaces' sidecar users there.
type redisUserOptions struct {
	manage bool
	conn   redisconn.Flags
	period time.Duration
}

func (r *redisUserOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&r.manage, "sidecar-redis-users", false, "manage the sidecars' Redis users: each namespace with an AgentPool gets the Secret --sidecar-redis-secret and an ACL user limited to its keys, on --sidecar-redis-addr as the --redis-username user; the webhook then requires the Secret")
	fs.DurationVar(&r.period, "sidecar-redis-users-period", redisusers.DefaultPeriod, "how often the sidecar Redis users are checked and restored (after a Redis restart)")
	r.conn.Register(fs)
}

// validate checks the flags against the rest of o.
func (r *redisUserOptions) validate(o *options) error {
	if err := r.conn.Validate(); err != nil {
		return err
	}
	if !r.manage {
		return nil
	}
	if o.sidecarRedisSecret == "" || o.sidecarRedis == "" {
		return fmt.Errorf("--sidecar-redis-users needs --sidecar-redis-secret and --sidecar-redis-addr")
	}
	if r.period <= 0 {
		return fmt.Errorf("--sidecar-redis-users-period: %v is not positive", r.period)
	}
	return nil
}

// setupRedisUsers runs the redisusers.Syncer on the leader.
func setupRedisUsers(ctx context.Context, mgr ctrl.Manager, o *options) error {
	ro := &redis.Options{Addr: o.sidecarRedis, DialTimeout: 2 * time.Second, MaxRetries: 1, PoolSize: 2}
	if err := o.redisUsers.conn.Apply(ro); err != nil {
		return err
	}
	rc := redis.NewClient(ro)
	if err := mgr.Add(closer{rc}); err != nil {
		return err
	}
	s := &redisusers.Syncer{Client: mgr.GetClient(), Secrets: mgr.GetAPIReader(), Redis: rc,
		SecretName: o.sidecarRedisSecret, Namespace: o.namespace, Period: o.redisUsers.period}
	return s.SetupWithManager(ctx, mgr)
}

// closer closes a Redis client when the manager stops.
type closer struct{ c *redis.Client }

// Start implements manager.Runnable.
func (c closer) Start(ctx context.Context) error {
	<-ctx.Done()
	return c.c.Close()
}
