package main

import (
	"context"
	"errors"

	"github.com/neuronetes/neuronetes/gateway/route"
)

// startKube watches the cluster and keeps the routing table and the tenant directory current.
func startKube(ctx context.Context, g *gw, pol route.Policy, deps *extensionDeps) error {
	return errors.New("kubernetes mode: not built yet")
}
