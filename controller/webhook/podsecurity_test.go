package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// restrictedAgent is a container that meets Pod Security "restricted" by itself.
func restrictedAgent(name string) corev1.Container {
	return corev1.Container{Name: name, Image: "x", SecurityContext: &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}}
}

// TestSidecarMeetsRestricted: the sidecar injected into an agent pod whose own containers meet
// Pod Security "restricted" keeps the pod admissible in a namespace that enforces it, with the
// class's keys Secret or without, and whatever the pod's securityContext leaves unset.
func TestSidecarMeetsRestricted(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	tests := []struct {
		name string
		pod  func() *corev1.Pod
		cfg  *nnv1.SidecarConfig
	}{
		{"container-level agent", func() *corev1.Pod {
			p := agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil)
			p.Spec.Containers = []corev1.Container{restrictedAgent("agent")}
			return p
		}, nil},
		{"pod-level runAsNonRoot, keys secret", func() *corev1.Pod {
			p := agentPod(map[string]string{nnv1.InjectSidecarLabel: "true"}, nil)
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
			p.Spec.Containers = []corev1.Container{restrictedAgent("agent"), restrictedAgent("tools")}
			return p
		}, &nnv1.SidecarConfig{KeysSecretName: "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod()
			if res := policy.AggregateCheckResults(eval.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec)); !res.Allowed {
				t.Fatalf("the agent pod itself is not restricted: %s", res.ForbiddenDetail())
			}
			inj := &Injector{RedisAddr: "r:6379", KeysSecret: "default-keys", ProbeCommand: DefaultProbeCommand}
			if ok, err := inj.Mutate(pod, tt.cfg); err != nil || !ok {
				t.Fatalf("Mutate = %v, %v", ok, err)
			}
			if res := policy.AggregateCheckResults(eval.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec)); !res.Allowed {
				t.Fatalf("with the sidecar the pod violates restricted: %s: %s", strings.Join(res.ForbiddenReasons, "; "), res.ForbiddenDetail())
			}
			sc := pod.Spec.InitContainers[0].SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
				t.Errorf("sidecar securityContext %+v: want a read-only root filesystem and a non-root UID", sc)
			}
		})
	}
}
