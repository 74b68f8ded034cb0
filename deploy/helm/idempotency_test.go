package helm_test

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestChartDispatcherIdempotencyKey renders the key that seals the tool
// proxy's stored answers: by default a chart Secret holding the base64 of 32
// random bytes, read by the dispatcher as $NEURONETES_IDEMPOTENCY_KEY; a
// Secret of the user's replaces it.
func TestChartDispatcherIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		set        []string
		wantSecret bool
		wantRef    string
	}{
		{"chart secret", nil, true, `{"key":"key","name":"nn-neuronetes-dispatcher-idempotency"}`},
		{"user secret", []string{`dispatcher.idempotencyKeySecret={"name":"mine","key":"k"}`}, false, `{"key":"k","name":"mine"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			sec := find(objs, "Secret", "nn-neuronetes-dispatcher-idempotency")
			if (sec != nil) != tc.wantSecret {
				t.Fatalf("chart idempotency Secret rendered: %v, want %v", sec != nil, tc.wantSecret)
			}
			if sec != nil {
				data, _ := get(sec, "data", "key").(string)
				inner, err := base64.StdEncoding.DecodeString(data)
				if err != nil {
					t.Fatalf("Secret data: %v", err)
				}
				if key, err := base64.StdEncoding.DecodeString(string(inner)); err != nil || len(key) != 32 {
					t.Fatalf("Secret value %q: %d bytes (%v), want the base64 of 32", inner, len(key), err)
				}
			}
			env := toJSON(get(container(find(objs, "Deployment", "nn-neuronetes-dispatcher"), "dispatcher"), "env"))
			if !strings.Contains(env, `"name":"NEURONETES_IDEMPOTENCY_KEY","valueFrom":{"secretKeyRef":`+tc.wantRef) {
				t.Fatalf("dispatcher env %s lacks NEURONETES_IDEMPOTENCY_KEY from %s", env, tc.wantRef)
			}
		})
	}
}
