package modelcreds

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

const release = "nn-system"

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := nnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&nnv1.Model{}).Build()
}

func model(ns, name, uri, secret string) *nnv1.Model {
	m := &nnv1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Generation: 1},
		Spec: nnv1.ModelSpec{Source: nnv1.ModelSource{URI: uri}, Digest: "sha256:" + strings.Repeat("a", 64)}}
	if secret != "" {
		m.Spec.Source.SecretRef = &nnv1.LocalObjectReference{Name: secret}
	}
	return m
}

func secret(ns, name string, kv ...string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.Data[kv[i]] = []byte(kv[i+1])
	}
	return s
}

func reconcileModel(t *testing.T, r *Reconciler, ns, name string) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	if err != nil {
		t.Fatalf("Reconcile %s/%s: %v", ns, name, err)
	}
	return res
}

// copyOf returns the copy of the Model ns/name, or nil.
func copyOf(t *testing.T, c client.Client, ns, name string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	err := c.Get(context.Background(), types.NamespacedName{Namespace: release, Name: nnv1.ModelSourceSecretName(ns, name)}, &s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

func condition(t *testing.T, c client.Client, ns, name string) *metav1.Condition {
	t.Helper()
	var m nnv1.Model
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(m.Status.Conditions, nnv1.ModelConditionSourceCredentials)
}

// TestCopyLifecycle: a Model's credentials are copied (credential keys only, labelled and
// annotated), follow the source Secret, and go with the secretRef and with the Model.
func TestCopyLifecycle(t *testing.T) {
	ctx := context.Background()
	m := model("tenant-a", "llama", "s3://weights/llama.gguf", "s3-creds")
	src := secret("tenant-a", "s3-creds", "accessKeyID", "AK", "secretAccessKey", "SK", "endpoint", "http://minio:9000", "unrelated", "not copied")
	c := newClient(t, m, src)
	r := &Reconciler{Client: c, Secrets: c, Namespace: release, Resync: 5 * time.Second}

	if res := reconcileModel(t, r, "tenant-a", "llama"); res.RequeueAfter != 5*time.Second {
		t.Errorf("RequeueAfter = %v, want the resync period", res.RequeueAfter)
	}
	cp := copyOf(t, c, "tenant-a", "llama")
	if cp == nil {
		t.Fatal("no copy written")
	}
	if string(cp.Data["accessKeyID"]) != "AK" || string(cp.Data["secretAccessKey"]) != "SK" || string(cp.Data["endpoint"]) != "http://minio:9000" {
		t.Errorf("copy data = %q", cp.Data)
	}
	if _, ok := cp.Data["unrelated"]; ok {
		t.Errorf("a key that is no credential was copied: %q", cp.Data)
	}
	if cp.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController || cp.Labels[nnv1.ModelSourceLabel] != "true" || cp.Type != corev1.SecretTypeOpaque {
		t.Errorf("copy labels %v type %q", cp.Labels, cp.Type)
	}
	for k, want := range map[string]string{nnv1.ModelSourceNamespaceAnnotation: "tenant-a", nnv1.ModelSourceNameAnnotation: "llama",
		nnv1.ModelSourceUIDAnnotation: "uid-tenant-a-llama", nnv1.ModelSourceSecretAnnotation: "s3-creds"} {
		if cp.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, cp.Annotations[k], want)
		}
	}
	if cond := condition(t, c, "tenant-a", "llama"); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonCopied {
		t.Errorf("condition = %+v, want True/Copied", cond)
	}

	// The tenant rotates the key: the copy follows.
	src.Data["secretAccessKey"] = []byte("SK2")
	if err := c.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	reconcileModel(t, r, "tenant-a", "llama")
	if cp := copyOf(t, c, "tenant-a", "llama"); cp == nil || string(cp.Data["secretAccessKey"]) != "SK2" {
		t.Fatalf("copy after the source changed: %+v", cp)
	}

	// The secretRef is removed: the copy and the condition go.
	var cur nnv1.Model
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Source.SecretRef = nil
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	reconcileModel(t, r, "tenant-a", "llama")
	if cp := copyOf(t, c, "tenant-a", "llama"); cp != nil {
		t.Fatalf("copy kept after the secretRef was removed: %+v", cp)
	}
	if cond := condition(t, c, "tenant-a", "llama"); cond != nil {
		t.Errorf("condition kept after the secretRef was removed: %+v", cond)
	}

	// The ref comes back, then the Model is deleted: the copy goes.
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Source.SecretRef = &nnv1.LocalObjectReference{Name: "s3-creds"}
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	reconcileModel(t, r, "tenant-a", "llama")
	if copyOf(t, c, "tenant-a", "llama") == nil {
		t.Fatal("no copy after the secretRef came back")
	}
	if err := c.Delete(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	reconcileModel(t, r, "tenant-a", "llama")
	if cp := copyOf(t, c, "tenant-a", "llama"); cp != nil {
		t.Fatalf("copy kept after the Model was deleted: %+v", cp)
	}
}

// TestForeignNamespaceSecretIsNeverRead: a Model naming a Secret that exists only in another
// namespace gets no copy (the reference carries no namespace: the reconciler looks only in the
// Model's own) and a condition naming the Secret it looked for.
func TestForeignNamespaceSecretIsNeverRead(t *testing.T) {
	victim := secret("tenant-b", "b-creds", "accessKeyID", "B-AK", "secretAccessKey", "B-SK")
	c := newClient(t, model("tenant-a", "steal", "s3://weights/x", "b-creds"), victim)
	r := &Reconciler{Client: c, Secrets: c, Namespace: release}
	reconcileModel(t, r, "tenant-a", "steal")
	if cp := copyOf(t, c, "tenant-a", "steal"); cp != nil {
		t.Fatalf("tenant-a's Model got a copy of tenant-b's Secret: %q", cp.Data)
	}
	cond := condition(t, c, "tenant-a", "steal")
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonSecretNotFound || !strings.Contains(cond.Message, "tenant-a/b-creds") {
		t.Fatalf("condition = %+v, want False/SecretNotFound naming tenant-a/b-creds", cond)
	}
	var list corev1.SecretList
	if err := c.List(context.Background(), &list, client.InNamespace(release)); err != nil || len(list.Items) != 0 {
		t.Fatalf("Secrets in the copy namespace: %v %d", err, len(list.Items))
	}
}

// TestSourceProblems: a missing Secret, a missing key, an invalid name and a namespace whose
// Secrets the controller may not read (Forbidden) each give a False condition naming the Secret
// and what is wrong, and remove a copy made before.
func TestSourceProblems(t *testing.T) {
	for _, tc := range []struct {
		name, uri, ref string
		src            *corev1.Secret
		reason         string
		msg            []string
	}{
		{"no such Secret", "s3://b/k", "gone", nil, ReasonSecretNotFound, []string{"tenant-a/gone", "does not exist"}},
		{"s3 without the secret key", "s3://b/k", "creds", secret("tenant-a", "creds", "accessKeyID", "AK"), ReasonKeyMissing,
			[]string{"tenant-a/creds", "lacks the key secretAccessKey", "s3://"}},
		{"s3 with an empty key", "s3://b/k", "creds", secret("tenant-a", "creds", "accessKeyID", "", "secretAccessKey", "SK"), ReasonKeyMissing,
			[]string{"lacks the key accessKeyID"}},
		{"https without a token", "https://h/m", "creds", secret("tenant-a", "creds", "accessKeyID", "AK"), ReasonKeyMissing,
			[]string{"tenant-a/creds", "lacks the key token", "https://"}},
		{"not a Secret name", "s3://b/k", "../kube-system/x", nil, ReasonInvalidName, []string{"spec.source.secretRef.name", "../kube-system/x"}},
		{"namespace not allowed", "s3://b/k", forbiddenSecret, secret("tenant-a", forbiddenSecret, "accessKeyID", "AK", "secretAccessKey", "SK"),
			ReasonNamespaceNotAllowed, []string{"tenant-a/" + forbiddenSecret, "controller.modelSourceNamespaces"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := model("tenant-a", "m", tc.uri, tc.ref)
			objs := []client.Object{m, Desired(m, secret("tenant-a", tc.ref, "token", "old"), release)} // a copy made before
			if tc.src != nil {
				objs = append(objs, tc.src)
			}
			c := newClient(t, objs...)
			r := &Reconciler{Client: c, Secrets: forbidding{c}, Namespace: release}
			reconcileModel(t, r, "tenant-a", "m")
			if cp := copyOf(t, c, "tenant-a", "m"); cp != nil {
				t.Errorf("copy kept: %q", cp.Data)
			}
			cond := condition(t, c, "tenant-a", "m")
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tc.reason {
				t.Fatalf("condition = %+v, want False/%s", cond, tc.reason)
			}
			for _, w := range tc.msg {
				if !strings.Contains(cond.Message, w) {
					t.Errorf("condition message %q lacks %q", cond.Message, w)
				}
			}
		})
	}
}

// forbiddenSecret is a Secret name forbidding answers Forbidden for, as the apiserver does where the
// controller has no Role.
const forbiddenSecret = "unreadable"

// forbidding is a Reader that refuses forbiddenSecret.
type forbidding struct{ client.Reader }

func (f forbidding) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key.Name == forbiddenSecret {
		return apierrors.NewForbidden(corev1.Resource("secrets"), key.Name, errors.New("RBAC: access denied"))
	}
	return f.Reader.Get(ctx, key, obj, opts...)
}

// TestForeignSecretOfTheCopyName: a Secret of a copy's name without the managed-by label is not
// overwritten nor deleted.
func TestForeignSecretOfTheCopyName(t *testing.T) {
	m := model("tenant-a", "m", "https://h/m", "creds")
	foreign := secret(release, nnv1.ModelSourceSecretName("tenant-a", "m"), "token", "admin's")
	c := newClient(t, m, secret("tenant-a", "creds", "token", "tenant's"), foreign)
	r := &Reconciler{Client: c, Secrets: c, Namespace: release}
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
	if err == nil || !strings.Contains(err.Error(), nnv1.ManagedByLabel) {
		t.Fatalf("Reconcile = %v, want a conflict naming %s", err, nnv1.ManagedByLabel)
	}
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	reconcileModel(t, r, "tenant-a", "m")
	if cp := copyOf(t, c, "tenant-a", "m"); cp == nil || string(cp.Data["token"]) != "admin's" {
		t.Fatalf("foreign Secret changed or deleted: %+v", cp)
	}
}

// TestConditionNotRewritten: an unchanged outcome writes no status (a resync is free).
func TestConditionNotRewritten(t *testing.T) {
	m := model("tenant-a", "m", "https://h/m", "creds")
	c := newClient(t, m, secret("tenant-a", "creds", "token", "t"))
	r := &Reconciler{Client: c, Secrets: c, Namespace: release}
	reconcileModel(t, r, "tenant-a", "m")
	first := condition(t, c, "tenant-a", "m")
	var before nnv1.Model
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(m), &before); err != nil {
		t.Fatal(err)
	}
	reconcileModel(t, r, "tenant-a", "m")
	var after nnv1.Model
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(m), &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("an unchanged condition was written again (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
	}
	if got := condition(t, c, "tenant-a", "m"); !got.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("transition time moved: %v -> %v", first.LastTransitionTime, got.LastTransitionTime)
	}
}

// TestModelOf: a copy enqueues the Model its annotations name, and nothing when it is outside the
// copy namespace, lacks an annotation, or names a Model outside the watched namespace.
func TestModelOf(t *testing.T) {
	m := model("tenant-a", "llama", "https://h/m", "creds")
	cp := Desired(m, secret("tenant-a", "creds", "token", "t"), release)
	elsewhere := cp.DeepCopy()
	elsewhere.Namespace = "tenant-a"
	bare := cp.DeepCopy()
	delete(bare.Annotations, nnv1.ModelSourceNameAnnotation)
	for _, tc := range []struct {
		name  string
		r     Reconciler
		obj   client.Object
		model string
	}{
		{"a copy", Reconciler{Namespace: release}, cp, "tenant-a/llama"},
		{"a copy, watched namespace", Reconciler{Namespace: release, WatchNamespace: "tenant-a"}, cp, "tenant-a/llama"},
		{"a copy of another namespace's Model", Reconciler{Namespace: release, WatchNamespace: "tenant-b"}, cp, ""},
		{"outside the copy namespace", Reconciler{Namespace: release}, elsewhere, ""},
		{"without the name annotation", Reconciler{Namespace: release}, bare, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.r.modelOf(tc.obj)
			switch {
			case tc.model == "" && len(got) != 0:
				t.Errorf("modelOf = %v, want none", got)
			case tc.model != "" && (len(got) != 1 || got[0].String() != tc.model):
				t.Errorf("modelOf = %v, want %s", got, tc.model)
			}
		})
	}
}
