package main

import (
	"flag"
	"sync"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/auth"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// egressFlags are --egress-allow-cidrs, --egress-allow-hosts and --egress-cluster-cidrs: the
// policy of every request to a user-chosen URL (guardrail webhooks and Presidio, the rollout
// classifier, OIDC discovery and JWKS). The gateway's own calls to agent pods do not use it.
var (
	egressFlags    egress.Flags
	oidcIssuers    string
	egressOnce     sync.Once
	egressPolicy   *egress.Policy
	egressParseErr error
)

func init() {
	egressFlags.Register(flag.CommandLine)
	flag.StringVar(&oidcIssuers, "oidc-allowed-issuers", "", "comma-separated OIDC issuers Tenants may name, each ISSUER (any namespace) or ISSUER=NS|NS (those namespaces); a Tenant naming any other issuer accepts no token (default: none)")
}

// gatewayEgress returns the egress policy of the flags, parsed once.
func gatewayEgress() (*egress.Policy, error) {
	egressOnce.Do(func() { egressPolicy, egressParseErr = egressFlags.Policy() })
	return egressPolicy, egressParseErr
}

// newAuthenticator returns the API-key and OIDC authenticator of dir under the egress policy
// and the approved issuers.
func newAuthenticator(dir *access.Holder) (*auth.Authenticator, error) {
	p, err := gatewayEgress()
	if err != nil {
		return nil, err
	}
	is, err := auth.ParseIssuers(oidcIssuers)
	if err != nil {
		return nil, err
	}
	return &auth.Authenticator{Dir: dir, HTTPClient: auth.NewHTTPClient(p), Issuers: is}, nil
}
