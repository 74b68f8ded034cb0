// Package access holds the gateway's tenants: who a caller is after authentication, which models
// it may use, its quotas and the priorities it may ask for. A Directory is an immutable snapshot
// built from Tenant objects and their API-key Secrets; the watch swaps it atomically.
package access

import (
	"fmt"
	"sync/atomic"

	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/apikeyhash"
)

// Quota limits a tenant in one pool; zero fields are unlimited.
type Quota struct {
	// RequestsPerMinute and RequestBurst shape the request bucket.
	RequestsPerMinute, RequestBurst float64
	// TokensPerMinute and TokenBurst shape the token bucket.
	TokensPerMinute, TokenBurst float64
	// MaxConcurrent caps in-flight requests.
	MaxConcurrent int
}

// Unlimited reports whether q limits nothing.
func (q Quota) Unlimited() bool {
	return q.RequestsPerMinute == 0 && q.TokensPerMinute == 0 && q.MaxConcurrent == 0
}

// Tenant is a caller.
type Tenant struct {
	// Name and Namespace of the Tenant object ("anonymous", "" without authentication).
	Name, Namespace string
	// AllModels allows every model of the namespace; else Models lists the allowed ids.
	AllModels bool
	Models    map[string]bool
	// Quota applies to each pool unless PoolQuotas names it.
	Quota      Quota
	PoolQuotas map[string]Quota
	// Priorities the tenant may request with the priority header.
	Priorities map[route.Priority]bool
	// Pool, when set, is the one pool the caller is served by (the dispatcher's calls for a
	// ToolBinding's AgentPool, gateway/auth.Dispatcher); its model must match the request's.
	Pool *route.PoolRef
	// Anonymous marks the tenant of a gateway without authentication: every model and priority
	// is allowed, in Namespace (AnonymousIn) or, in static-backends mode, the empty namespace.
	Anonymous bool
}

// Key is "namespace/name", or "anonymous".
func (t *Tenant) Key() string {
	if t.Anonymous {
		return "anonymous"
	}
	return t.Namespace + "/" + t.Name
}

// Allows reports whether the tenant may use model.
func (t *Tenant) Allows(model string) bool {
	return t.Anonymous || t.AllModels || t.Models[model]
}

// QuotaFor returns the quota of the tenant in pool.
func (t *Tenant) QuotaFor(pool string) Quota {
	if q, ok := t.PoolQuotas[pool]; ok {
		return q
	}
	return t.Quota
}

// Anonymous is the tenant of every request when authentication is off.
var Anonymous = &Tenant{Name: "anonymous", AllModels: true, Anonymous: true,
	Priorities: map[route.Priority]bool{route.PriorityLow: true, route.PriorityNormal: true, route.PriorityHigh: true}}

// AnonymousIn is the anonymous tenant of a Kubernetes-mode gateway without authentication: it
// reaches the pools of namespace ns only, so turning authentication off never opens every
// tenant's pools at once.
func AnonymousIn(ns string) *Tenant {
	t := *Anonymous
	t.Namespace = ns
	return &t
}

// OIDCBinding maps tokens of one issuer and audience (and claim) to a tenant.
type OIDCBinding struct {
	Issuer, Audience, JWKSURI string
	// Claim and Values, when Claim is set, select the tenant among those of the issuer.
	Claim  string
	Values []string
	Tenant *Tenant
}

// Directory is one snapshot of every tenant and credential.
type Directory struct {
	// keys maps the hex SHA-256 of an API key to its tenant.
	keys map[string]*Tenant
	// OIDC lists the OIDC bindings.
	OIDC []OIDCBinding
	// Tenants lists every tenant.
	Tenants []*Tenant
}

// NewDirectory returns an empty directory.
func NewDirectory() *Directory { return &Directory{keys: map[string]*Tenant{}} }

// HashKey returns the hex SHA-256 of an API key (apikeyhash.Hash).
func HashKey(key string) string { return apikeyhash.Hash(key) }

// ParseStoredKey turns a Secret value into a key hash (apikeyhash.ParseStored): "sha256:<64 hex>"
// is taken as a hash, anything else as the key itself.
func ParseStoredKey(v string) (string, error) { return apikeyhash.ParseStored(v) }

// AddKey maps a key hash to t. A hash already mapped to another tenant is an error (the first
// tenant keeps it).
func (d *Directory) AddKey(hash string, t *Tenant) error {
	if prev, ok := d.keys[hash]; ok && prev != t {
		return fmt.Errorf("API key already belongs to tenant %s", prev.Key())
	}
	d.keys[hash] = t
	return nil
}

// ByKey returns the tenant of an API key. Keys are compared by hash: a lookup's timing reveals
// nothing about the stored keys beyond what a SHA-256 preimage would.
func (d *Directory) ByKey(key string) (*Tenant, bool) {
	t, ok := d.keys[HashKey(key)]
	return t, ok
}

// Keys is the number of API keys known.
func (d *Directory) Keys() int { return len(d.keys) }

// Holder holds the current directory.
type Holder struct {
	cur atomic.Pointer[Directory]
}

// NewHolder holds d (an empty directory when nil).
func NewHolder(d *Directory) *Holder {
	h := &Holder{}
	if d == nil {
		d = NewDirectory()
	}
	h.cur.Store(d)
	return h
}

// Load returns the current directory.
func (h *Holder) Load() *Directory { return h.cur.Load() }

// Store replaces the directory.
func (h *Holder) Store(d *Directory) { h.cur.Store(d) }
