package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
)

// A Tenant whose key Secret lacks the api-keys label (tried as a new user would) or is missing
// gets APIKeysReady=False naming the Secret and the label; a Tenant whose Secrets are read gets
// True; a second sync writes nothing.
func TestTenantStatusNamesSecretAndLabel(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	tenant := func(name, secret string) *v1alpha1.Tenant {
		return &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Generation: 1},
			Spec: v1alpha1.TenantSpec{Models: []string{"*"}, APIKeys: []v1alpha1.APIKeySource{{SecretName: secret}}}}
	}
	h := access.HashKey("sk-test-1")
	secret := func(name string, labelled bool) *corev1.Secret {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Data: map[string][]byte{"k": []byte(h)}}
		if labelled {
			sec.Labels = map[string]string{v1alpha1.APIKeysSecretLabel: "true"}
		}
		return sec
	}
	objs := []client.Object{tenant("new-user", "keys"), tenant("typo", "nope"), tenant("ok", "good"),
		secret("keys", false), secret("good", true)}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Tenant{}).Build()
	ctx := context.Background()
	sync := func() {
		var tl v1alpha1.TenantList
		if err := c.List(ctx, &tl); err != nil {
			t.Fatal(err)
		}
		// The gateway's cache holds only labelled Secrets.
		_, problems := BuildDirectory(tl.Items, SecretKeySets([]corev1.Secret{*secret("good", true)}), false)
		(&TenantStatus{Client: c, Reader: c}).Sync(ctx, tl.Items, problems)
	}
	sync()
	for _, tc := range []struct {
		name, status, reason string
		words                []string
	}{
		{"new-user", "False", ReasonSecretNotLabelled, []string{"team-a/keys", v1alpha1.APIKeysSecretLabel, "401"}},
		{"typo", "False", ReasonSecretNotFound, []string{"team-a/nope", "not found"}},
		{"ok", "True", ReasonSecretsRead, nil},
	} {
		var tn v1alpha1.Tenant
		if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: tc.name}, &tn); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.TenantAPIKeysReady)
		if cond == nil || string(cond.Status) != tc.status || cond.Reason != tc.reason || cond.ObservedGeneration != 1 {
			t.Fatalf("%s: condition %+v, want %s %s", tc.name, cond, tc.status, tc.reason)
		}
		for _, w := range tc.words {
			if !strings.Contains(cond.Message, w) {
				t.Errorf("%s: message %q does not name %q", tc.name, cond.Message, w)
			}
		}
	}
	var before v1alpha1.Tenant
	_ = c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "new-user"}, &before)
	sync()
	var after v1alpha1.Tenant
	_ = c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "new-user"}, &after)
	if before.ResourceVersion != after.ResourceVersion {
		t.Fatalf("an unchanged condition was written again (%s -> %s)", before.ResourceVersion, after.ResourceVersion)
	}
}

// The watcher hands each rebuild's tenants to the status loop, which syncs the latest off the
// rebuild goroutine.
func TestWatcherStatusLoop(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "t", Generation: 1},
		Spec: v1alpha1.TenantSpec{APIKeys: []v1alpha1.APIKeySource{{SecretName: "missing"}}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(tn).WithStatusSubresource(&v1alpha1.Tenant{}).Build()
	w := &Watcher{Status: &TenantStatus{Client: c, Reader: c}, statusKick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.statusLoop(ctx)
	tenants := []v1alpha1.Tenant{*tn}
	_, problems := BuildDirectory(tenants, nil, false)
	w.queueStatus(tenants, problems)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var got v1alpha1.Tenant
		if err := c.Get(ctx, client.ObjectKeyFromObject(tn), &got); err != nil {
			t.Fatal(err)
		}
		if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.TenantAPIKeysReady); cond != nil {
			if cond.Reason != ReasonSecretNotFound {
				t.Fatalf("condition %+v", cond)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the status loop wrote no condition")
		}
	}
}

// With published key hashes the gateway reads no Secret (no Reader): the condition takes the
// controller's reason, and a Secret the controller has not published says so.
func TestTenantStatusFromPublishedHashes(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	tn := func(name, secret string) *v1alpha1.Tenant {
		return &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Generation: 1},
			Spec: v1alpha1.TenantSpec{APIKeys: []v1alpha1.APIKeySource{{SecretName: secret}}}}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(tn("unlabelled", "u"), tn("late", "l"), tn("ok", "k")).
		WithStatusSubresource(&v1alpha1.Tenant{}).Build()
	ctx := context.Background()
	var tl v1alpha1.TenantList
	if err := c.List(ctx, &tl); err != nil {
		t.Fatal(err)
	}
	ks := KeySets{{Namespace: "team-a", Name: "u"}: {Problem: "NotLabelled"},
		{Namespace: "team-a", Name: "k"}: {Hashes: map[string]string{"k": access.HashKey("sk-1")}}}
	_, problems := BuildDirectory(tl.Items, ks, true)
	(&TenantStatus{Client: c}).Sync(ctx, tl.Items, problems)
	for name, want := range map[string]string{"unlabelled": ReasonSecretNotLabelled, "late": ReasonSecretNotPublished, "ok": ReasonSecretsRead} {
		var got v1alpha1.Tenant
		if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, &got); err != nil {
			t.Fatal(err)
		}
		if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.TenantAPIKeysReady); cond == nil || cond.Reason != want {
			t.Errorf("%s: condition %+v, want reason %s", name, cond, want)
		}
	}
}
