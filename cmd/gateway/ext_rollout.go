package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/redisacl"
	"github.com/neuronetes/neuronetes/gateway/rollout"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// rolloutAssignmentTTL is --rollout-assignment-ttl; feedbackRate and feedbackBurst are
// --feedback-rate and --feedback-burst.
var (
	rolloutAssignmentTTL        time.Duration
	feedbackRate, feedbackBurst float64
)

func init() {
	flag.DurationVar(&rolloutAssignmentTTL, "rollout-assignment-ttl", rollout.DefaultAssignmentTTL, "how long an unused conversation keeps its AgentRollout variant (refreshed on use; in Redis with --redis-addr)")
	flag.Float64Var(&feedbackRate, "feedback-rate", 5, "POST /v1/feedback: scores per second each tenant may post to one replica")
	flag.Float64Var(&feedbackBurst, "feedback-burst", 20, "POST /v1/feedback: scores each tenant may post at once to one replica")
	extensionBuilders = append(extensionBuilders, extensionBuilder{name: "rollouts", build: buildRollout})
}

// buildRollout adds the AgentRollout variant selector, mirror and observer, and POST
// /v1/feedback. Static-backends mode has one pool and no rollouts.
func buildRollout(ctx context.Context, deps extensionDeps, ext *stage.Extensions) error {
	if rolloutAssignmentTTL <= 0 {
		return fmt.Errorf("--rollout-assignment-ttl: %s must be positive", rolloutAssignmentTTL)
	}
	if feedbackRate <= 0 || feedbackBurst < 1 {
		return fmt.Errorf("--feedback-rate must be positive and --feedback-burst at least 1, got %v and %v", feedbackRate, feedbackBurst)
	}
	if deps.Static || deps.Cache == nil {
		klog.FromContext(ctx).V(2).Info("AgentRollouts need cluster mode; not watching them")
		return nil
	}
	if ext.Selector != nil {
		return fmt.Errorf("another extension already set the variant selector")
	}
	rec := rollout.NewRecorder(deps.Registerer)
	table := rollout.NewTable(func(v *rollout.View, old string) { rec.Forget(v, old) })
	var store rollout.Store = rollout.NewMemoryStore(rolloutAssignmentTTL, 1_000_000)
	if deps.Redis != nil {
		store = &rollout.RedisStore{Client: deps.Redis, TTL: rolloutAssignmentTTL, Prefix: deps.RedisPrefix + redisacl.RolloutPrefix}
	}
	sp := &rollout.Splitter{Table: table, Store: store, Recorder: rec}
	pol, err := gatewayEgress()
	if err != nil {
		return err
	}
	synced, err := rollout.Watch(ctx, deps.Cache, table, rollout.NewClassifierClient(pol))
	if err != nil {
		return err
	}
	deps.WaitFor(synced)
	ext.Selector = sp
	ext.Mirrors = append(ext.Mirrors, sp)
	ext.Observers = append(ext.Observers, sp)
	if ext.Handlers == nil {
		ext.Handlers = map[string]http.Handler{}
	}
	ext.Handlers["POST /v1/feedback"] = &rollout.Feedback{Splitter: sp, Sessions: deps.Sessions,
		Rate: feedbackRate, Burst: feedbackBurst}
	return nil
}
