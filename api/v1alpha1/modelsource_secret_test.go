package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestModelSourceSecretName(t *testing.T) {
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 190)
	for _, tc := range []struct{ ns, name string }{
		{"tenant-a", "llama"},
		{"tenant", "a-llama"}, // same readable part as the next one
		{"tenant-a", "llama.v2"},
		{strings.Repeat("n", 63), long},
		{"t", strings.Repeat("c", 226) + ".x"}, // a cut right after the dot
	} {
		got := ModelSourceSecretName(tc.ns, tc.name)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("ModelSourceSecretName(%q, %q) = %q: not a Secret name: %v", tc.ns, tc.name, got, errs)
		}
		if !strings.HasPrefix(got, ModelSourceSecretPrefix) {
			t.Errorf("ModelSourceSecretName(%q, %q) = %q lacks the prefix %q", tc.ns, tc.name, got, ModelSourceSecretPrefix)
		}
		if again := ModelSourceSecretName(tc.ns, tc.name); again != got {
			t.Errorf("not deterministic: %q then %q", got, again)
		}
	}
	if a, b := ModelSourceSecretName("tenant-a", "llama"), ModelSourceSecretName("tenant", "a-llama"); a == b {
		t.Errorf("two Models share the copy name %q", a)
	}
	if got, want := ModelSourceSecretName("tenant-a", "llama"), "model-src-tenant-a-llama-"; !strings.HasPrefix(got, want) {
		t.Errorf("ModelSourceSecretName = %q, want it to start with %q", got, want)
	}
}

func TestModelSecretRequiredKeys(t *testing.T) {
	for uri, want := range map[string]string{
		"s3://b/k":         "accessKeyID,secretAccessKey",
		"https://h/m":      "token",
		"http://h/m":       "token",
		"file:///models/m": "",
	} {
		if got := strings.Join(ModelSecretRequiredKeys(uri), ","); got != want {
			t.Errorf("ModelSecretRequiredKeys(%q) = %q, want %q", uri, got, want)
		}
	}
}
