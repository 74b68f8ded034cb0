// Package auth authenticates gateway callers: API keys (compared by SHA-256 against the hashes
// of the tenant directory) and OIDC bearer JWTs (signature checked against the issuer's JWKS,
// issuer, audience, expiry and not-before checked, then mapped to a tenant by issuer, audience
// and an optional claim). Every failure is a 401 whose body says what was wrong with the
// credential and nothing about tenants or models.
package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/sync/singleflight"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// Authenticator implements engine.Authenticator.
type Authenticator struct {
	// Dir holds the current tenants and credentials.
	Dir *access.Holder
	// HTTPClient fetches discovery documents and JWKS; it must dial through the egress policy
	// (NewHTTPClient). Default: NewHTTPClient of the zero policy (public addresses only).
	HTTPClient *http.Client
	// Issuers are the admin-approved issuers; a binding to any other accepts no token.
	Issuers Issuers
	// FailureTTL is how long a failed discovery is remembered before it is tried again
	// (egress.DefaultFailureTTL when 0); meanwhile tokens of that issuer fail at once.
	FailureTTL time.Duration

	mu        sync.Mutex
	verifiers map[verifierKey]*oidc.IDTokenVerifier
	failures  *egress.FailureCache[verifierKey] // created under mu with FailureTTL
	discovery singleflight.Group
	warned    sync.Map // verifierKey+tenant of unapproved bindings already logged
}

type verifierKey struct{ issuer, audience, jwks string }

// SigningAlgs are the JWT algorithms accepted.
var SigningAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA}

// Credential returns the bearer token or x-api-key value of h, "" when none.
func Credential(h http.Header) string {
	if v := h.Get("Authorization"); v != "" {
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return strings.TrimSpace(h.Get("X-Api-Key"))
}

func unauthorized(code, format string, args ...any) *openai.Error {
	return openai.NewError(http.StatusUnauthorized, "invalid_request_error", code, "", format, args...)
}

// Authenticate maps the request's credential to a tenant.
func (a *Authenticator) Authenticate(ctx context.Context, h http.Header) (*access.Tenant, *openai.Error) {
	cred := Credential(h)
	if cred == "" {
		if h.Get("Authorization") != "" {
			return nil, unauthorized("invalid_authorization", "the Authorization header must be \"Bearer <API key or token>\"")
		}
		return nil, unauthorized("missing_api_key", "no credential: send Authorization: Bearer <API key or token>, or x-api-key")
	}
	dir := a.Dir.Load()
	if looksLikeJWT(cred) {
		return a.oidcTenant(ctx, dir, cred)
	}
	if t, ok := dir.ByKey(cred); ok {
		return t, nil
	}
	return nil, unauthorized("invalid_api_key", "invalid API key")
}

// looksLikeJWT reports whether s has the three dot-separated parts of a compact JWS whose
// header is a JSON object.
func looksLikeJWT(s string) bool {
	return strings.Count(s, ".") == 2 && strings.HasPrefix(s, "eyJ")
}

// issuerOf reads the unverified "iss" claim to find the bindings that could verify the token.
func issuerOf(token string) (string, error) {
	parts := strings.Split(token, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("token payload is not base64url: %w", err)
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return "", fmt.Errorf("token payload is not JSON: %w", err)
	}
	return c.Iss, nil
}

// oidcTenant verifies the token against the bindings of its issuer; exactly one tenant must
// accept it.
func (a *Authenticator) oidcTenant(ctx context.Context, dir *access.Directory, token string) (*access.Tenant, *openai.Error) {
	iss, err := issuerOf(token)
	if err != nil {
		return nil, unauthorized("invalid_token", "invalid token: %v", err)
	}
	var found *access.Tenant
	var errs []error
	anyVerified, unapproved := false, false
	verified := map[verifierKey]map[string]any{}
	for _, b := range dir.OIDC {
		if b.Issuer != iss {
			continue
		}
		if !a.Issuers.Approved(b.Issuer, b.Tenant.Namespace) {
			unapproved = true
			a.warnUnapproved(ctx, b)
			continue
		}
		k := verifierKey{b.Issuer, b.Audience, b.JWKSURI}
		claims, ok := verified[k]
		if !ok {
			claims, err = a.verify(ctx, k, token)
			if err != nil {
				errs = append(errs, err)
				verified[k] = nil
				continue
			}
			verified[k] = claims
		}
		anyVerified = anyVerified || claims != nil
		if claims == nil || !claimMatches(claims, b) {
			continue
		}
		if found != nil && found != b.Tenant {
			return nil, unauthorized("ambiguous_token", "the token matches more than one tenant; set oidc[].claim to tell them apart")
		}
		found = b.Tenant
	}
	if found != nil {
		return found, nil
	}
	// The most telling reason: an expired token (its signature and audience were good), then a
	// token some binding verified whose claims no tenant accepts, then the verification errors
	// (an audience mismatch last: other bindings of the issuer may expect other audiences).
	for _, e := range errs {
		var exp *oidc.TokenExpiredError
		if errors.As(e, &exp) {
			return nil, unauthorized("token_expired", "token expired at %s", exp.Expiry.UTC().Format("2006-01-02T15:04:05Z"))
		}
	}
	if !anyVerified && len(errs) > 0 {
		pick := errs[0]
		for _, e := range errs {
			if tokenProblem(e) != "wrong audience" {
				pick = e
				break
			}
		}
		klog.FromContext(ctx).V(2).Info("Token rejected", "issuer", iss, "err", pick)
		return nil, unauthorized("invalid_token", "invalid token: %s", tokenProblem(pick))
	}
	if unapproved && len(errs) == 0 && !anyVerified {
		return nil, unauthorized("invalid_token", "token not accepted: its issuer is not approved by the gateway's administrator")
	}
	return nil, unauthorized("invalid_token", "token not accepted: no tenant trusts its issuer, audience and claims")
}

// warnUnapproved logs, once per binding, the Tenant whose spec.oidc names an issuer the admin
// has not approved for its namespace.
func (a *Authenticator) warnUnapproved(ctx context.Context, b access.OIDCBinding) {
	if _, seen := a.warned.LoadOrStore(b.Tenant.Key()+"\x00"+b.Issuer, true); seen {
		return
	}
	klog.FromContext(ctx).Info("Tenant names an OIDC issuer that is not approved for its namespace; its tokens are refused (gateway --oidc-allowed-issuers, chart gateway.oidc.allowedIssuers)",
		"tenant", b.Tenant.Key(), "issuer", b.Issuer)
}

// tokenProblem is the part of a verification error safe to show (issuer and audience
// mismatches, a bad signature), without key material.
func tokenProblem(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "expected audience"):
		return "wrong audience"
	case strings.Contains(s, "id token issued by a different provider"):
		return "wrong issuer"
	case strings.Contains(s, "signature"):
		return "bad signature"
	case strings.Contains(s, "before the nbf"), strings.Contains(s, "not valid yet"):
		return "not valid yet"
	}
	return "verification failed"
}

func (a *Authenticator) verify(ctx context.Context, k verifierKey, token string) (map[string]any, error) {
	v, err := a.verifier(ctx, k)
	if err != nil {
		return nil, err
	}
	ctx = oidc.ClientContext(ctx, a.client())
	idt, err := v.Verify(ctx, token)
	if err != nil {
		return nil, err
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, fmt.Errorf("token claims: %w", err)
	}
	return claims, nil
}

func (a *Authenticator) client() *http.Client {
	if a.HTTPClient != nil {
		return a.HTTPClient
	}
	return defaultHTTPClient
}

// verifier returns the cached verifier of an issuer and audience. With a JWKS URI the keys are
// fetched from it; otherwise discovery runs once. Concurrent first requests share one
// discovery, and a failed one is remembered for FailureTTL, so a stalling or failing issuer
// costs at most one request in flight per TTL instead of one per token.
func (a *Authenticator) verifier(ctx context.Context, k verifierKey) (*oidc.IDTokenVerifier, error) {
	a.mu.Lock()
	v := a.verifiers[k]
	if a.failures == nil {
		a.failures = &egress.FailureCache[verifierKey]{TTL: a.FailureTTL}
	}
	failures := a.failures
	a.mu.Unlock()
	if v != nil {
		return v, nil
	}
	if err, ok := failures.Get(k); ok {
		return nil, err
	}
	// The key set outlives the request that created it; the client's timeout bounds each fetch.
	bg := oidc.ClientContext(context.WithoutCancel(ctx), a.client())
	cfg := &oidc.Config{ClientID: k.audience, SupportedSigningAlgs: SigningAlgs}
	if k.jwks != "" {
		v = oidc.NewVerifier(k.issuer, oidc.NewRemoteKeySet(bg, k.jwks), cfg)
	} else {
		got, err, _ := a.discovery.Do(k.issuer+"\x00"+k.audience, func() (any, error) {
			p, err := oidc.NewProvider(bg, k.issuer)
			if err != nil {
				err = fmt.Errorf("OIDC discovery for %s: %w", k.issuer, err)
				failures.Put(k, err)
				return nil, err
			}
			return p.Verifier(cfg), nil
		})
		if err != nil {
			return nil, err
		}
		v = got.(*oidc.IDTokenVerifier)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verifiers == nil {
		a.verifiers = map[verifierKey]*oidc.IDTokenVerifier{}
	}
	a.verifiers[k] = v
	return v, nil
}

// claimMatches checks a binding's claim: the claim's value (a string, or any element of an
// array) must be one of the binding's values, or the tenant's name when none are listed.
func claimMatches(claims map[string]any, b access.OIDCBinding) bool {
	if b.Claim == "" {
		return true
	}
	want := b.Values
	if len(want) == 0 {
		want = []string{b.Tenant.Name}
	}
	switch v := claims[b.Claim].(type) {
	case string:
		return slices.Contains(want, v)
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && slices.Contains(want, s) {
				return true
			}
		}
	}
	return false
}

// Expiry returns the "exp" claim of h's credential when it is a JWT, read without verifying
// it: callers use it only for a credential Authenticate has accepted, to know when to check it
// again. API keys and tokens without exp have none.
func Expiry(h http.Header) (time.Time, bool) {
	cred := Credential(h)
	if !looksLikeJWT(cred) {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(cred, ".")[1])
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &c); err != nil || c.Exp == nil {
		return time.Time{}, false
	}
	f, err := c.Exp.Float64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}
