package webhook

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/nodeagent/agent"
)

func weightsPod(t *testing.T, mut ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	m := &nnv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "llama"}, Spec: nnv1.ModelSpec{Digest: "sha256:" + hex64, MountPath: "/models"}}
	vol, mount, err := agent.WeightsVolume(agent.DefaultCacheDir, m, "weights")
	if err != nil {
		t.Fatal(err)
	}
	p := agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil)
	p.Spec.Containers = []corev1.Container{restrictedAgent("agent")}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{mount}
	p.Spec.Volumes = append(p.Spec.Volumes, vol)
	for _, f := range mut {
		f(p)
	}
	return p
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestInjectWeightsWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		image string
		want  bool
	}{
		{"a pod mounting a ready directory gets the wait container", weightsPod(t), "na:dev", true},
		{"no image: nothing", weightsPod(t), "", false},
		{"already there: nothing", weightsPod(t, func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: agent.WeightsWaitContainerName})
		}), "na:dev", false},
		{"a hostPath that is not a ready directory: nothing", weightsPod(t, func(p *corev1.Pod) {
			p.Spec.Volumes[len(p.Spec.Volumes)-1].HostPath.Path = "/var/lib/neuronetes/models/sha256/" + hex64
		}), "na:dev", false},
		{"a subPath mount: nothing", weightsPod(t, func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].SubPath = "x" }), "na:dev", false},
		{"no mount of the volume: nothing", weightsPod(t, func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts = nil }), "na:dev", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := InjectWeightsWait(tc.pod, tc.image, corev1.PullNever)
			if got != tc.want {
				t.Fatalf("InjectWeightsWait = %v, want %v", got, tc.want)
			}
			if !got {
				return
			}
			last := tc.pod.Spec.InitContainers[len(tc.pod.Spec.InitContainers)-1]
			if want := []string{"/nodeagent", "wait-weights", "-dir", "/models"}; last.Name != agent.WeightsWaitContainerName || !reflect.DeepEqual(last.Command, want) ||
				last.Image != tc.image || last.ImagePullPolicy != corev1.PullNever {
				t.Fatalf("init container %+v, want %s running %v", last, agent.WeightsWaitContainerName, want)
			}
			if len(last.VolumeMounts) != 1 || !last.VolumeMounts[0].ReadOnly {
				t.Fatalf("wait container mounts %+v, want the ready directory read-only", last.VolumeMounts)
			}
		})
	}
}

// TestWeightsWaitAddsNoPodSecurityViolation: after the sidecar and the wait container are injected,
// the pod breaks Pod Security restricted only as it did before (its weights hostPath), and without
// that volume it is restricted: the wait container needs nothing more.
func TestWeightsWaitAddsNoPodSecurityViolation(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	forbidden := func(p *corev1.Pod) []string {
		var out []string
		for _, r := range eval.EvaluatePod(restricted, &p.ObjectMeta, &p.Spec) {
			if !r.Allowed {
				out = append(out, r.ForbiddenReason)
			}
		}
		return out
	}
	pod := weightsPod(t)
	before := forbidden(pod)
	inj := &Injector{RedisAddr: "r:6379", ProbeCommand: DefaultProbeCommand, WeightsWaitImage: "na:dev"}
	if ok, err := inj.Mutate(pod, nil); err != nil || !ok {
		t.Fatalf("Mutate = %v, %v", ok, err)
	}
	if !InjectWeightsWait(pod, inj.WeightsWaitImage, "") {
		t.Fatal("no wait container")
	}
	if after := forbidden(pod); !reflect.DeepEqual(after, before) || len(before) != 1 {
		t.Fatalf("restricted violations %q after injection, want exactly those before (%q: the hostPath)", after, before)
	}
	// Without the hostPath (an emptyDir in its place), the injected pod is restricted.
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].HostPath != nil {
			pod.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
	}
	if v := forbidden(pod); len(v) != 0 {
		t.Fatalf("the injected containers break restricted: %q", v)
	}
}
