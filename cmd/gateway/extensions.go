package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/gateway/sessionkey"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// extensionDeps is what an extension builder may use.
type extensionDeps struct {
	// Registerer registers the extension's metrics on the gateway's /metrics.
	Registerer prometheus.Registerer
	// Static is true in static-backends mode (no Kubernetes: Client and Cache are nil).
	Static bool
	// Client reads objects from the gateway's informer cache (and writes through the apiserver).
	Client client.Client
	// Cache is the informer cache; an extension may watch its own kinds through it (the cache is
	// started after every builder ran).
	Cache cache.Cache
	// Redis is the gateway's Redis client shared by its replicas (nil without --redis-addr).
	Redis redis.UniversalClient
	// RedisPrefix is the gateway's --redis-prefix: extensions keep their keys under it, the
	// only keys the gateway's Redis user may touch (gateway/redisacl).
	RedisPrefix string
	// Sessions scopes session keys by tenant, as the engine does.
	Sessions *sessionkey.Scoper
	// WaitFor adds a condition of readiness: an extension that watches the cache passes its
	// handler's HasSynced, so the gateway is not ready before its first objects are applied
	// (nil conditions are ignored).
	WaitFor func(synced func() bool)
}

// extensionBuilder adds extensions (request stages, chunk filters, a variant selector, mirrors,
// observers, handlers) to ext.
type extensionBuilder struct {
	name  string
	build func(ctx context.Context, deps extensionDeps, ext *stage.Extensions) error
}

// extensionBuilders run in order. A package that implements gateway/stage interfaces wires
// itself in with a file of its own in this directory that appends to this list from init().
var extensionBuilders []extensionBuilder

// buildExtensions runs every builder.
func buildExtensions(ctx context.Context, deps extensionDeps) (stage.Extensions, error) {
	var ext stage.Extensions
	for _, b := range extensionBuilders {
		if err := b.build(ctx, deps, &ext); err != nil {
			return ext, fmt.Errorf("%s: %w", b.name, err)
		}
	}
	return ext, nil
}
