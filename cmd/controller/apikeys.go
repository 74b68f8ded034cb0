package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/neuronetes/neuronetes/controller/apikeys"
)

// apiKeyOptions publish the Tenants' API-key hashes for the gateway (controller/apikeys).
type apiKeyOptions struct {
	namespace  string
	namespaces string
	resync     time.Duration
}

var apiKeys apiKeyOptions

func init() {
	flag.StringVar(&apiKeys.namespace, "api-key-hashes-namespace", "", "publish the hashes of the Tenants' API keys as ConfigMaps api-keys.<tenant namespace> in this namespace, for gateways started with the same --api-key-hashes-namespace (controller/apikeys; empty: none)")
	flag.StringVar(&apiKeys.namespaces, "api-key-namespaces", "", "comma-separated namespaces whose Tenants' API-key Secrets are published (the gateway's --namespaces; empty: all)")
	flag.DurationVar(&apiKeys.resync, "api-key-resync", apikeys.DefaultResync, "how often every API-key Secret a Tenant names is read again: a revoked key stops working within this time plus the gateways' watch delay")
}

// validate checks the flags.
func (o apiKeyOptions) validate() error {
	if o.resync <= 0 {
		return fmt.Errorf("--api-key-resync: %v is not positive", o.resync)
	}
	for _, ns := range append([]string{o.namespace}, o.list()...) {
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--api-key-hashes-namespace/--api-key-namespaces: %q is not a namespace name: %v", ns, errs)
		}
	}
	if o.namespace == "" && o.namespaces != "" {
		return fmt.Errorf("--api-key-namespaces needs --api-key-hashes-namespace")
	}
	return nil
}

func (o apiKeyOptions) list() []string {
	var out []string
	for _, s := range strings.Split(o.namespaces, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// setup adds the publisher when --api-key-hashes-namespace is set.
func (o apiKeyOptions) setup(ctx context.Context, mgr ctrl.Manager) error {
	if o.namespace == "" {
		return nil
	}
	if err := apikeys.Setup(ctx, mgr, o.namespace, o.list(), o.resync); err != nil {
		return fmt.Errorf("api-key publisher: %w", err)
	}
	return nil
}
