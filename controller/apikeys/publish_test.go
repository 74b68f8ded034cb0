package apikeys

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/apikeyhash"
)

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := nnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func tenant(ns, name string, secrets ...string) *nnv1.Tenant {
	tn := &nnv1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, s := range secrets {
		tn.Spec.APIKeys = append(tn.Spec.APIKeys, nnv1.APIKeySource{SecretName: s})
	}
	return tn
}

func keySecret(ns, name string, labelled bool, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	if labelled {
		s.Labels = map[string]string{nnv1.APIKeysSecretLabel: "true"}
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// published reads back the entries of tenant namespace ns, or nil when there is no ConfigMap.
func published(t *testing.T, c client.Client, ns string) map[string]apikeyhash.Entry {
	t.Helper()
	var cm corev1.ConfigMap
	err := c.Get(context.Background(), client.ObjectKey{Namespace: "nn-system", Name: apikeyhash.ConfigMapName(ns)}, &cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if cm.Annotations[apikeyhash.NamespaceAnnotation] != ns || cm.Labels[apikeyhash.Label] != "true" {
		t.Fatalf("ConfigMap %s: labels %v annotations %v", cm.Name, cm.Labels, cm.Annotations)
	}
	e, err := apikeyhash.Decode(cm.Data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestPublisherLifecycle: keys are published as hashes only, in the Tenant's own namespace; a
// revoked key (its Secret deleted, or the key removed) is unpublished at the next sync; an
// unlabelled Secret is published as a problem without reading its values; a namespace whose
// Tenants are gone loses its ConfigMap; a failed read keeps the previous hashes.
func TestPublisherLifecycle(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		tenant("team-a", "a", "a-keys", "plain", "missing"),
		tenant("team-b", "b", "a-keys"),
		keySecret("team-a", "a-keys", true, map[string]string{"k1": "sk-a1", "k2": "sk-a2"}),
		keySecret("team-a", "plain", false, map[string]string{"password": "hunter2"}),
	).Build()
	failing := false
	get := func(ctx context.Context, ns, name string) (*corev1.Secret, error) {
		if failing {
			return nil, errors.New("apiserver unavailable")
		}
		var s corev1.Secret
		return &s, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
	}
	p := &Publisher{Tenants: c, Get: get, Client: c, Namespace: "nn-system"}
	sync := func() {
		t.Helper()
		if err := p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	a := published(t, c, "team-a")
	if a["a-keys"].Hashes["k1"] != apikeyhash.Hash("sk-a1") || a["a-keys"].Hashes["k2"] != apikeyhash.Hash("sk-a2") {
		t.Fatalf("team-a a-keys %+v", a["a-keys"])
	}
	if a["plain"].Problem != apikeyhash.ProblemNotLabelled || len(a["plain"].Hashes) != 0 || a["missing"].Problem != apikeyhash.ProblemNotFound {
		t.Fatalf("team-a problems %+v", a)
	}
	// team-b names a Secret that exists only in team-a: never read across namespaces.
	if b := published(t, c, "team-b"); b["a-keys"].Problem != apikeyhash.ProblemNotFound {
		t.Fatalf("team-b %+v", b)
	}
	var cms corev1.ConfigMapList
	_ = c.List(ctx, &cms)
	for _, cm := range cms.Items {
		for _, v := range cm.Data {
			if strings.Contains(v, "sk-a1") || strings.Contains(v, "hunter2") {
				t.Fatalf("ConfigMap %s publishes a secret value: %s", cm.Name, v)
			}
		}
	}

	// A transient read error keeps what was published.
	failing = true
	sync()
	if got := published(t, c, "team-a"); got["a-keys"].Hashes["k1"] != apikeyhash.Hash("sk-a1") {
		t.Fatalf("a failed read dropped the keys: %+v", got)
	}
	failing = false

	// Revoke k1, then the whole Secret.
	s := keySecret("team-a", "a-keys", true, map[string]string{"k2": "sk-a2"})
	var cur corev1.Secret
	_ = c.Get(ctx, client.ObjectKeyFromObject(s), &cur)
	cur.Data = s.Data
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	sync()
	if got := published(t, c, "team-a")["a-keys"].Hashes; len(got) != 1 || got["k2"] == "" {
		t.Fatalf("after removing k1: %v", got)
	}
	if err := c.Delete(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	sync()
	if got := published(t, c, "team-a")["a-keys"]; got.Problem != apikeyhash.ProblemNotFound || len(got.Hashes) != 0 {
		t.Fatalf("after deleting the Secret: %+v", got)
	}

	// team-b's Tenant goes: its ConfigMap goes.
	if err := c.Delete(ctx, tenant("team-b", "b")); err != nil {
		t.Fatal(err)
	}
	sync()
	if got := published(t, c, "team-b"); got != nil {
		t.Fatalf("team-b still published: %+v", got)
	}
}

// TestDesiredSkipsUnreadableWithoutPrevious: a Secret that cannot be read (e.g. forbidden in a
// namespace outside the controller's Roles) and was never published stays unpublished.
func TestDesiredSkipsUnreadableWithoutPrevious(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "k", errors.New("no"))
	get := func(context.Context, string, string) (*corev1.Secret, error) { return nil, forbidden }
	got, errs := Desired(context.Background(), []nnv1.Tenant{*tenant("x", "t", "k")}, get, nil)
	if len(got) != 0 || len(errs) != 1 {
		t.Fatalf("published %v, errors %v", got, errs)
	}
}
