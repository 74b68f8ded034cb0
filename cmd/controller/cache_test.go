package main

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestManagerCacheWatchesOnlyTheNamespace: with --namespace the manager's cache watches that
// namespace alone (the chart's controller.watchNamespace Roles grant nothing elsewhere); Secrets
// are cached only in --model-source-namespace.
func TestManagerCacheWatchesOnlyTheNamespace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       options
		wantNS  []string
		secrets []string
	}{
		{"all namespaces", options{}, nil, nil},
		{"one namespace", options{namespace: "team-a", modelSourceNamespace: "nn-system"}, []string{"team-a"}, []string{"nn-system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := managerCacheOptions(&tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(maps.Keys(opts.DefaultNamespaces)); !slices.Equal(got, tc.wantNS) {
				t.Errorf("cached namespaces %v, want %v", got, tc.wantNS)
			}
			var secrets []string
			for obj, by := range opts.ByObject {
				if _, ok := obj.(*corev1.Secret); ok {
					secrets = slices.Sorted(maps.Keys(by.Namespaces))
				}
			}
			if !slices.Equal(secrets, tc.secrets) {
				t.Errorf("Secrets cached in %v, want %v", secrets, tc.secrets)
			}
		})
	}
}
