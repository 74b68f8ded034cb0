package agent

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

// fakeCreds answers like the controller's endpoint and records what was asked.
type fakeCreds struct {
	creds modelsrcapi.Credentials
	err   error
	asked []modelsrcapi.Request
}

func (f *fakeCreds) Credentials(_ context.Context, req modelsrcapi.Request) (modelsrcapi.Credentials, error) {
	f.asked = append(f.asked, req)
	return f.creds, f.err
}

// TestSourceOptionsAsksTheController: the agent takes a Model's credentials from the controller's
// endpoint for the Model's namespace, name and UID (it reads no Secret), uses them as S3 keys or
// a Bearer token, and a refusal fails the Model with the refusal's reason, naming the secretRef
// and the condition to look at, without any credential.
func TestSourceOptionsAsksTheController(t *testing.T) {
	m := func(uri string) *v1alpha1.Model {
		return &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "llama", UID: "uid-1"},
			Spec: v1alpha1.ModelSpec{Source: v1alpha1.ModelSource{URI: uri, SecretRef: &v1alpha1.LocalObjectReference{Name: "creds"}}}}
	}
	s3 := modelsrcapi.Credentials{AccessKeyID: "AK", SecretAccessKey: "SK-SECRET", Endpoint: "http://s3.example:9000", Region: "eu"}
	refused := &modelsrcapi.Error{Status: 403, Refusal: modelsrcapi.Refusal{Reason: modelsrcapi.ReasonNotUsedOnNode, Message: "no pod on node n1 uses Model tenant-a/llama"}}
	for _, tc := range []struct {
		name    string
		src     *fakeCreds
		uri     string
		wantErr string
	}{
		{name: "s3 keys", src: &fakeCreds{creds: s3}, uri: "s3://b/k"},
		{name: "http token", src: &fakeCreds{creds: modelsrcapi.Credentials{Token: "TOK-SECRET"}}, uri: "https://h/w"},
		{name: "refused", src: &fakeCreds{err: refused}, uri: "s3://b/k", wantErr: "NotUsedOnNode"},
		{name: "no endpoint configured", uri: "s3://b/k", wantErr: "no --model-source-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{}
			if tc.src != nil {
				r.Credentials = tc.src
			}
			opts, err := r.sourceOptions(context.Background(), m(tc.uri))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `spec.source.secretRef "creds"`) ||
					(tc.src != nil && !strings.Contains(err.Error(), v1alpha1.ModelConditionSourceCredentials)) || strings.Contains(err.Error(), "SECRET") {
					t.Fatalf("sourceOptions = %+v, %v; want an error naming the secretRef, the condition and %q", opts, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := (modelsrcapi.Request{Namespace: "tenant-a", Name: "llama", UID: "uid-1"}); len(tc.src.asked) != 1 || tc.src.asked[0] != want {
				t.Fatalf("asked %+v, want one %+v", tc.src.asked, want)
			}
			switch tc.uri {
			case "s3://b/k":
				if opts.S3AccessKey != "AK" || opts.S3SecretKey != "SK-SECRET" || opts.S3Endpoint != "http://s3.example:9000" || opts.S3Region != "eu" {
					t.Fatalf("sourceOptions = %+v, want the controller's S3 credentials", opts)
				}
			default:
				if got := opts.HTTPHeader.Get("Authorization"); got != "Bearer TOK-SECRET" {
					t.Fatalf("Authorization = %q", got)
				}
			}
		})
	}
}
