package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestMutateRedisCredentials injects the namespace's Redis user from the
// Secret named by RedisSecret (optional unless RedisSecretRequired), and
// nothing without it.
func TestMutateRedisCredentials(t *testing.T) {
	for _, tc := range []struct {
		name     string
		secret   string
		required bool
		want     map[string]string // env name -> Secret key
	}{
		{"no Secret configured", "", false, nil},
		{"optional namespace Secret", "neuronetes-sidecar-redis", false, map[string]string{"NEURONETES_REDIS_USERNAME": "username", "NEURONETES_REDIS_PASSWORD": "password"}},
		{"managed namespace Secret", "neuronetes-sidecar-redis", true, map[string]string{"NEURONETES_REDIS_USERNAME": "username", "NEURONETES_REDIS_PASSWORD": "password"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil, "agent")
			if ok, err := (&Injector{RedisSecret: tc.secret, RedisSecretRequired: tc.required}).Mutate(pod, &nnv1.SidecarConfig{RedisAddr: "r:1"}); !ok || err != nil {
				t.Fatalf("Mutate = %v, %v", ok, err)
			}
			got := map[string]*corev1.SecretKeySelector{}
			for _, e := range pod.Spec.InitContainers[0].Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					got[e.Name] = e.ValueFrom.SecretKeyRef
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Secret env %v, want %v", got, tc.want)
			}
			for name, key := range tc.want {
				ref := got[name]
				if ref == nil || ref.Name != tc.secret || ref.Key != key || ref.Optional == nil || *ref.Optional == tc.required {
					t.Errorf("%s = %+v, want %s/%s with optional=%v", name, ref, tc.secret, key, !tc.required)
				}
			}
		})
	}
}
