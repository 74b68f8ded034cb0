package kube

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/apikeyhash"
)

// KeySets are the API-key Secrets a directory is built from, by namespace and name: read from
// the labelled Secrets themselves (SecretKeySets) or from the hashes the controller publishes
// (PublishedKeySets).
type KeySets map[route.PoolRef]apikeyhash.Entry

// SecretKeySets hashes the keys of API-key Secrets (those labelled v1alpha1.APIKeysSecretLabel).
func SecretKeySets(secrets []corev1.Secret) KeySets {
	ks := KeySets{}
	for i := range secrets {
		s := &secrets[i]
		ks[route.PoolRef{Namespace: s.Namespace, Name: s.Name}] = apikeyhash.FromData(s.Data)
	}
	return ks
}

// PublishedKeySets reads the ConfigMaps controller/apikeys publishes in its namespace ns: each
// names its tenant namespace in apikeyhash.NamespaceAnnotation and must be named
// apikeyhash.ConfigMapName of it. ConfigMaps of another namespace, or whose name and annotation
// disagree, are skipped with an error.
func PublishedKeySets(cms []corev1.ConfigMap, ns string) (KeySets, []error) {
	ks := KeySets{}
	var errs []error
	for i := range cms {
		cm := &cms[i]
		tenantNS := cm.Annotations[apikeyhash.NamespaceAnnotation]
		if cm.Namespace != ns || tenantNS == "" || cm.Name != apikeyhash.ConfigMapName(tenantNS) {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s: not a published API-key ConfigMap of namespace %s (name %s, annotation %s=%q); skipped",
				cm.Namespace, cm.Name, ns, apikeyhash.ConfigMapName(tenantNS), apikeyhash.NamespaceAnnotation, tenantNS))
			continue
		}
		entries, err := apikeyhash.Decode(cm.Data)
		if err != nil {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s: %w; skipped", cm.Namespace, cm.Name, err))
			continue
		}
		for name, e := range entries {
			ks[route.PoolRef{Namespace: tenantNS, Name: name}] = e
		}
	}
	return ks, errs
}

// BuildDirectory builds the tenant directory from Tenants and the key sets of their API-key
// Secrets (ks, from SecretKeySets or PublishedKeySets; a Secret is looked up in its Tenant's own
// namespace only). Tenants are taken in namespace/name order, so an API key listed by two tenants
// deterministically belongs to the first; the conflict is reported. With published key sets a
// Secret without an entry is reported with ReasonSecretNotPublished. The directory holds key
// hashes only.
func BuildDirectory(tenants []v1alpha1.Tenant, ks KeySets, published bool) (*access.Directory, []error) {
	d := access.NewDirectory()
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
		for _, src := range tn.Spec.APIKeys {
			e, ok := ks[route.PoolRef{Namespace: tn.Namespace, Name: src.SecretName}]
			if se := secretProblem(tn, src.SecretName, e, ok, published); se != nil {
				errs = append(errs, se)
				continue
			}
			errs = append(errs, addKeys(d, t, tn.Namespace, src.SecretName, e)...)
		}
		for _, o := range tn.Spec.OIDC {
			d.OIDC = append(d.OIDC, access.OIDCBinding{Issuer: o.Issuer, Audience: o.Audience, JWKSURI: o.JWKSURI,
				Claim: o.Claim, Values: o.ClaimValues, Tenant: t})
		}
	}
	return d, errs
}

// secretProblem is the SecretError of a Tenant's Secret that has no usable entry, or nil.
func secretProblem(tn *v1alpha1.Tenant, secret string, e apikeyhash.Entry, ok, published bool) *SecretError {
	se := &SecretError{Tenant: tn.Namespace + "/" + tn.Name, Namespace: tn.Namespace, Secret: secret}
	switch {
	case !ok && published:
		se.Reason = ReasonSecretNotPublished
	case !ok:
		// Unknown: the Secret is missing or unlabelled (TenantStatus tells which).
	case e.Problem == apikeyhash.ProblemNotFound:
		se.Reason = ReasonSecretNotFound
	case e.Problem == apikeyhash.ProblemNotLabelled:
		se.Reason = ReasonSecretNotLabelled
	default:
		return nil
	}
	return se
}

// addKeys maps each hash of e to t, in data-key order.
func addKeys(d *access.Directory, t *access.Tenant, ns, secret string, e apikeyhash.Entry) []error {
	var errs []error
	for _, k := range e.SortedKeys() {
		if err := d.AddKey(e.Hashes[k], t); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: Secret %s/%s key %q: %w", t.Key(), ns, secret, k, err))
		}
	}
	errKeys := make([]string, 0, len(e.Errors))
	for k := range e.Errors {
		errKeys = append(errKeys, k)
	}
	sort.Strings(errKeys)
	for _, k := range errKeys {
		errs = append(errs, fmt.Errorf("tenant %s: Secret %s/%s key %q: %s", t.Key(), ns, secret, k, e.Errors[k]))
	}
	return errs
}

// SecretError is a Tenant's API-key Secret that yields no key: absent, without the
// v1alpha1.APIKeysSecretLabel label, or (published key sets) not yet published by the controller.
type SecretError struct {
	// Tenant is "<namespace>/<name>".
	Tenant string
	// Namespace and Secret name the Secret.
	Namespace, Secret string
	// Reason is the condition reason when known (published key sets say which); empty when the
	// gateway's cache only knows that it holds no such labelled Secret.
	Reason string
}

func (e *SecretError) Error() string {
	if e.Reason == ReasonSecretNotPublished {
		return fmt.Sprintf("tenant %s: spec.apiKeys: the controller has not published the key hashes of Secret %s/%s",
			e.Tenant, e.Namespace, e.Secret)
	}
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
