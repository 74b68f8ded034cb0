// Package apikeys publishes the hashes of the Tenants' API keys for the gateway, so that the
// internet-facing gateway holds no Secret right: the controller reads each Secret a Tenant's
// spec.apiKeys names (get, one at a time, in the Tenant's namespace) and keeps one ConfigMap per
// tenant namespace, apikeyhash.ConfigMapName(ns), in its own namespace, where tenants cannot
// write. Only SHA-256 hashes are published (internal/apikeyhash), never a key.
package apikeys

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/apikeyhash"
)

// DefaultResync is how often every named Secret is read again: a revoked or rotated key reaches
// the gateways within it (plus their watch delay).
const DefaultResync = 10 * time.Second

// SecretGetter reads one Secret (the controller's uncached reader: get, no list or watch).
type SecretGetter func(ctx context.Context, ns, name string) (*corev1.Secret, error)

// Desired returns the entries to publish per tenant namespace: one per Secret a Tenant names, in
// the Tenant's own namespace. A Secret that is missing is published as ProblemNotFound, one
// without v1alpha1.APIKeysSecretLabel as ProblemNotLabelled (its values are never read). When a
// read fails otherwise, prev's entry is kept (a transient error does not drop keys), or none is
// published if there is none; the errors are returned.
func Desired(ctx context.Context, tenants []nnv1.Tenant, get SecretGetter, prev map[string]map[string]apikeyhash.Entry) (map[string]map[string]apikeyhash.Entry, []error) {
	out := map[string]map[string]apikeyhash.Entry{}
	var errs []error
	for i := range tenants {
		tn := &tenants[i]
		for _, src := range tn.Spec.APIKeys {
			ns, name := tn.Namespace, src.SecretName
			if _, done := out[ns][name]; done {
				continue
			}
			e, err := entryOf(ctx, get, ns, name)
			if err != nil {
				errs = append(errs, fmt.Errorf("tenant %s/%s: Secret %s/%s: %w", tn.Namespace, tn.Name, ns, name, err))
				old, ok := prev[ns][name]
				if !ok {
					continue
				}
				e = old
			}
			if out[ns] == nil {
				out[ns] = map[string]apikeyhash.Entry{}
			}
			out[ns][name] = e
		}
	}
	return out, errs
}

func entryOf(ctx context.Context, get SecretGetter, ns, name string) (apikeyhash.Entry, error) {
	s, err := get(ctx, ns, name)
	switch {
	case apierrors.IsNotFound(err):
		return apikeyhash.Entry{Problem: apikeyhash.ProblemNotFound}, nil
	case err != nil:
		return apikeyhash.Entry{}, err
	}
	if _, ok := s.Labels[nnv1.APIKeysSecretLabel]; !ok {
		return apikeyhash.Entry{Problem: apikeyhash.ProblemNotLabelled}, nil
	}
	return apikeyhash.FromData(s.Data), nil
}

// ConfigMap is the published object of tenant namespace tenantNS in namespace ns.
func ConfigMap(ns, tenantNS string, entries map[string]apikeyhash.Entry) (*corev1.ConfigMap, error) {
	data, err := apikeyhash.Encode(entries)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apikeyhash.ConfigMapName(tenantNS),
		Labels:      map[string]string{apikeyhash.Label: "true", nnv1.ManagedByLabel: nnv1.ManagedByController},
		Annotations: map[string]string{apikeyhash.NamespaceAnnotation: tenantNS}}, Data: data}, nil
}

// Publisher keeps the published ConfigMaps equal to Desired.
type Publisher struct {
	// Tenants lists the Tenants whose keys are published (a cache over the gateway's namespaces).
	Tenants client.Reader
	// Get reads a named Secret.
	Get SecretGetter
	// Client reads and writes the ConfigMaps of Namespace (uncached).
	Client client.Client
	// Namespace is where the ConfigMaps are kept (the controller's own).
	Namespace string

	prev map[string]map[string]apikeyhash.Entry
}

// Sync publishes once: creates, updates and deletes ConfigMaps so that there is exactly one per
// namespace with Tenants naming Secrets.
func (p *Publisher) Sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var tl nnv1.TenantList
	if err := p.Tenants.List(ctx, &tl); err != nil {
		return fmt.Errorf("list tenants: %w", err)
	}
	want, errs := Desired(ctx, tl.Items, p.Get, p.prev)
	for _, err := range errs {
		logger.Error(err, "API-key Secret not read; its previous hashes stay published")
	}
	var have corev1.ConfigMapList
	if err := p.Client.List(ctx, &have, client.InNamespace(p.Namespace), client.HasLabels{apikeyhash.Label}); err != nil {
		return fmt.Errorf("list published ConfigMaps: %w", err)
	}
	existing := map[string]*corev1.ConfigMap{}
	for i := range have.Items {
		existing[have.Items[i].Name] = &have.Items[i]
	}
	nss := make([]string, 0, len(want))
	for ns := range want {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		cm, err := ConfigMap(p.Namespace, ns, want[ns])
		if err != nil {
			return err
		}
		if err := p.put(ctx, cm, existing[cm.Name]); err != nil {
			return err
		}
		delete(existing, cm.Name)
	}
	for _, cm := range existing {
		if err := p.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
		logger.V(2).Info("API-key hashes unpublished", "configMap", cm.Name)
	}
	p.prev = want
	return nil
}

// put creates cm, or updates old when its data, labels or annotations differ.
func (p *Publisher) put(ctx context.Context, cm, old *corev1.ConfigMap) error {
	if old == nil {
		if err := p.Client.Create(ctx, cm); err != nil {
			return fmt.Errorf("create ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("API-key hashes published", "configMap", cm.Name)
		return nil
	}
	if maps.Equal(old.Data, cm.Data) && maps.Equal(old.Labels, cm.Labels) && maps.Equal(old.Annotations, cm.Annotations) {
		return nil
	}
	next := old.DeepCopy()
	next.Data, next.BinaryData, next.Labels, next.Annotations = cm.Data, nil, cm.Labels, cm.Annotations
	if err := p.Client.Update(ctx, next); err != nil {
		return fmt.Errorf("update ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}
