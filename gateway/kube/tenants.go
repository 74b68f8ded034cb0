package kube

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// BuildDirectory builds the tenant directory from Tenants and their API-key Secrets (those
// labelled v1alpha1.APIKeysSecretLabel). Tenants are taken in namespace/name order, so an API
// key listed by two tenants deterministically belongs to the first; the conflict is reported.
// The returned directory holds key hashes only.
func BuildDirectory(tenants []v1alpha1.Tenant, secrets []corev1.Secret) (*access.Directory, []error) {
	d := access.NewDirectory()
	sec := map[route.PoolRef]*corev1.Secret{}
	for i := range secrets {
		s := &secrets[i]
		sec[route.PoolRef{Namespace: s.Namespace, Name: s.Name}] = s
	}
	sort.Slice(tenants, func(i, j int) bool {
		if tenants[i].Namespace != tenants[j].Namespace {
			return tenants[i].Namespace < tenants[j].Namespace
		}
		return tenants[i].Name < tenants[j].Name
	})
	var errs []error
	for i := range tenants {
		tn := &tenants[i]
		t := tenantOf(tn)
		d.Tenants = append(d.Tenants, t)
		for _, ks := range tn.Spec.APIKeys {
			s := sec[route.PoolRef{Namespace: tn.Namespace, Name: ks.SecretName}]
			if s == nil {
				errs = append(errs, &SecretError{Tenant: tn.Namespace + "/" + tn.Name, Namespace: tn.Namespace, Secret: ks.SecretName})
				continue
			}
			keys := make([]string, 0, len(s.Data))
			for k := range s.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				h, err := access.ParseStoredKey(string(s.Data[k]))
				if err == nil {
					err = d.AddKey(h, t)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("tenant %s: Secret %s/%s key %q: %w", t.Key(), s.Namespace, s.Name, k, err))
				}
			}
		}
		for _, o := range tn.Spec.OIDC {
			d.OIDC = append(d.OIDC, access.OIDCBinding{Issuer: o.Issuer, Audience: o.Audience, JWKSURI: o.JWKSURI,
				Claim: o.Claim, Values: o.ClaimValues, Tenant: t})
		}
	}
	return d, errs
}

// SecretError is a Tenant's API-key Secret the gateway's cache does not hold: absent, or without
// the v1alpha1.APIKeysSecretLabel label (the cache holds only labelled Secrets).
type SecretError struct {
	// Tenant is "<namespace>/<name>".
	Tenant string
	// Namespace and Secret name the Secret.
	Namespace, Secret string
}

func (e *SecretError) Error() string {
	return fmt.Sprintf("tenant %s: spec.apiKeys: Secret %s/%s not found or not labelled %s",
		e.Tenant, e.Namespace, e.Secret, v1alpha1.APIKeysSecretLabel)
}

func tenantOf(tn *v1alpha1.Tenant) *access.Tenant {
	t := &access.Tenant{Name: tn.Name, Namespace: tn.Namespace, Models: map[string]bool{},
		PoolQuotas: map[string]access.Quota{}, Priorities: map[route.Priority]bool{}}
	for _, m := range tn.Spec.Models {
		if m == "*" {
			t.AllModels = true
		}
		t.Models[m] = true
	}
	if tn.Spec.Quota != nil {
		t.Quota = quotaOf(tn.Spec.Quota)
	}
	for _, pq := range tn.Spec.PoolQuotas {
		t.PoolQuotas[pq.Pool] = quotaOf(&pq.Quota)
	}
	for _, p := range tn.Spec.AllowedPriorities {
		if pr, ok := route.ParsePriority(string(p)); ok {
			t.Priorities[pr] = true
		}
	}
	return t
}

func quotaOf(q *v1alpha1.TenantQuota) access.Quota {
	f := func(p *int64) float64 {
		if p == nil {
			return 0
		}
		return float64(*p)
	}
	out := access.Quota{RequestsPerMinute: f(q.RequestsPerMinute), RequestBurst: f(q.RequestBurst),
		TokensPerMinute: f(q.TokensPerMinute), TokenBurst: f(q.TokenBurst)}
	if q.MaxConcurrent != nil {
		out.MaxConcurrent = int(*q.MaxConcurrent)
	}
	return out
}
