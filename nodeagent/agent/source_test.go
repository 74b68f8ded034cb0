package agent

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestSourceOptionsReadOnlyTheCopy: the agent takes a Model's credentials from the controller's
// copy in SourceNamespace, never from the tenant's Secret, and refuses a copy made for another
// Model (a recreated one) or another Secret.
func TestSourceOptionsReadOnlyTheCopy(t *testing.T) {
	const sourceNS = "nn-system"
	m := &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "llama", UID: "uid-1"},
		Spec: v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: "s3://b/k", SecretRef: &v1alpha1.LocalObjectReference{Name: "creds"}}}}
	copyOf := func(uid, secret string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sourceNS, Name: v1alpha1.ModelSourceSecretName("tenant-a", "llama"),
			Labels: map[string]string{v1alpha1.ManagedByLabel: v1alpha1.ManagedByController, v1alpha1.ModelSourceLabel: "true"},
			Annotations: map[string]string{v1alpha1.ModelSourceNamespaceAnnotation: "tenant-a", v1alpha1.ModelSourceNameAnnotation: "llama",
				v1alpha1.ModelSourceUIDAnnotation: uid, v1alpha1.ModelSourceSecretAnnotation: secret}},
			Data: map[string][]byte{"accessKeyID": []byte("COPY-AK"), "secretAccessKey": []byte("COPY-SK"), "endpoint": []byte("http://s3.example:9000"), "region": []byte("eu")}}
	}
	tenant := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "creds"},
		Data: map[string][]byte{"accessKeyID": []byte("TENANT-AK"), "secretAccessKey": []byte("TENANT-SK")}}
	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	v1alpha1.AddToScheme(scheme)
	for _, tc := range []struct {
		name     string
		copy     *corev1.Secret
		sourceNS string
		wantErr  string
	}{
		{"the controller's copy", copyOf("uid-1", "creds"), sourceNS, ""},
		{"no copy yet", nil, sourceNS, "not found"},
		{"a copy of a deleted Model of that name", copyOf("uid-0", "creds"), sourceNS, "was not made by the controller for this Model"},
		{"a copy of the Secret named before", copyOf("uid-1", "old-creds"), sourceNS, "was not made by the controller for this Model"},
		{"no source namespace", copyOf("uid-1", "creds"), "", "no --model-source-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{tenant}
			if tc.copy != nil {
				objs = append(objs, tc.copy)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Secret); ok && key.Namespace != sourceNS {
						t.Errorf("the node agent read Secret %s outside %s", key, sourceNS)
					}
					return c.Get(ctx, key, obj, opts...)
				},
			}).Build()
			r := &Reconciler{Client: c, APIReader: c, SourceNamespace: tc.sourceNS}
			opts, err := r.sourceOptions(context.Background(), m)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `spec.source.secretRef "creds"`) {
					t.Fatalf("sourceOptions = %+v, %v; want an error naming the secretRef and %q", opts, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.S3AccessKey != "COPY-AK" || opts.S3SecretKey != "COPY-SK" || opts.S3Endpoint != "http://s3.example:9000" || opts.S3Region != "eu" {
				t.Fatalf("sourceOptions = %+v, want the copy's credentials", opts)
			}
		})
	}
}
