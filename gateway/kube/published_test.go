package kube

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/internal/apikeyhash"
)

// published is a ConfigMap as controller/apikeys writes it into ns for tenantNS.
func published(t *testing.T, ns, name, tenantNS string, entries map[string]apikeyhash.Entry) corev1.ConfigMap {
	t.Helper()
	data, err := apikeyhash.Encode(entries)
	if err != nil {
		t.Fatal(err)
	}
	return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels:      map[string]string{apikeyhash.Label: "true"},
		Annotations: map[string]string{apikeyhash.NamespaceAnnotation: tenantNS}}, Data: data}
}

// TestPublishedKeySets: a Tenant authenticates with the hashes published for its own namespace
// only. A Tenant of team-a naming a Secret that exists (published) only in team-b gets no key;
// a ConfigMap outside the controller's namespace, or whose name and annotation disagree (a
// forgery claiming another namespace), is skipped; the published problems become the Tenant's
// condition reasons, and an unpublished Secret says so.
func TestPublishedKeySets(t *testing.T) {
	const ctrlNS = "neuronetes-system"
	victim := map[string]apikeyhash.Entry{"keys": apikeyhash.FromData(map[string][]byte{"k": []byte("sk-victim")})}
	cms := []corev1.ConfigMap{
		published(t, ctrlNS, apikeyhash.ConfigMapName("team-b"), "team-b", victim),
		published(t, ctrlNS, apikeyhash.ConfigMapName("team-a"), "team-a", map[string]apikeyhash.Entry{
			"own":        apikeyhash.FromData(map[string][]byte{"k": []byte("sk-own")}),
			"unlabelled": {Problem: apikeyhash.ProblemNotLabelled},
			"gone":       {Problem: apikeyhash.ProblemNotFound},
		}),
		// Forgeries: a tenant's own namespace, and a name that disagrees with the annotation.
		published(t, "team-a", apikeyhash.ConfigMapName("team-a"), "team-a", map[string]apikeyhash.Entry{"forged": apikeyhash.FromData(map[string][]byte{"k": []byte("sk-forged")})}),
		published(t, ctrlNS, apikeyhash.ConfigMapName("team-b")+"x", "team-a", map[string]apikeyhash.Entry{"forged": apikeyhash.FromData(map[string][]byte{"k": []byte("sk-forged")})}),
	}
	ks, errs := PublishedKeySets(cms, ctrlNS)
	if len(errs) != 2 {
		t.Fatalf("errors %v, want the two forgeries skipped", errs)
	}
	tenant := func(ns, name string, secrets ...string) v1alpha1.Tenant {
		tn := v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.TenantSpec{Models: []string{"*"}}}
		for _, s := range secrets {
			tn.Spec.APIKeys = append(tn.Spec.APIKeys, v1alpha1.APIKeySource{SecretName: s})
		}
		return tn
	}
	tenants := []v1alpha1.Tenant{tenant("team-a", "attacker", "keys", "forged", "own", "unlabelled", "gone", "new"), tenant("team-b", "victim", "keys")}
	d, derrs := BuildDirectory(tenants, ks, true)
	if v, ok := d.ByKey("sk-victim"); !ok || v.Namespace != "team-b" {
		t.Fatalf("the victim's key resolves to %+v, %v", v, ok)
	}
	if _, ok := d.ByKey("sk-forged"); ok {
		t.Fatal("a forged ConfigMap's key authenticates")
	}
	if a, ok := d.ByKey("sk-own"); !ok || a.Name != "attacker" {
		t.Fatal("team-a's own published key does not authenticate")
	}
	reasons := map[string]string{}
	for _, e := range derrs {
		var se *SecretError
		if errors.As(e, &se) {
			reasons[se.Secret] = se.Reason
		}
	}
	want := map[string]string{"keys": ReasonSecretNotPublished, "forged": ReasonSecretNotPublished,
		"unlabelled": ReasonSecretNotLabelled, "gone": ReasonSecretNotFound, "new": ReasonSecretNotPublished}
	for s, r := range want {
		if reasons[s] != r {
			t.Errorf("Secret %s: reason %q, want %q (all: %v)", s, reasons[s], r, reasons)
		}
	}
	if d.Keys() != 2 || access.HashKey("sk-own") == "" {
		t.Errorf("directory holds %d keys, want 2", d.Keys())
	}
}
