package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubectl/pkg/util/qos"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestSidecarResourcesAndQoS(t *testing.T) {
	// As admitted: the API server defaults requests to limits before mutating webhooks run.
	burstableInit := []corev1.Container{{Name: "fetch", Resources: corev1.ResourceRequirements{Requests: list("cpu", "1")}}}
	podLevel := &corev1.ResourceRequirements{Requests: list("cpu", "8", "memory", "64Gi"), Limits: list("cpu", "8", "memory", "64Gi")}
	guaranteedAgent := corev1.ResourceRequirements{Requests: list("cpu", "8", "memory", "64Gi", "nvidia.com/gpu", "1"),
		Limits: list("cpu", "8", "memory", "64Gi", "nvidia.com/gpu", "1")}
	tests := []struct {
		name       string
		agent      corev1.ResourceRequirements
		init       []corev1.Container
		podLevel   *corev1.ResourceRequirements
		injector   *Injector
		wantQoS    corev1.PodQOSClass
		wantReq    corev1.ResourceList
		wantLimits corev1.ResourceList
		wantGoMax  string
	}{
		{"best-effort agent", corev1.ResourceRequirements{}, nil, nil, &Injector{GoMaxProcs: DefaultGoMaxProcs},
			corev1.PodQOSBurstable, list("cpu", "100m", "memory", "128Mi"), list("memory", "1Gi"), "2"},
		{"burstable agent", corev1.ResourceRequirements{Requests: list("cpu", "2")}, nil, nil, &Injector{GoMaxProcs: DefaultGoMaxProcs},
			corev1.PodQOSBurstable, list("cpu", "100m", "memory", "128Mi"), list("memory", "1Gi"), "2"},
		{"guaranteed agent stays guaranteed", guaranteedAgent, nil, nil, &Injector{GoMaxProcs: DefaultGoMaxProcs},
			corev1.PodQOSGuaranteed, list("cpu", "100m", "memory", "1Gi"), list("cpu", "100m", "memory", "1Gi"), "2"},
		{"guaranteed, no GOMAXPROCS", corev1.ResourceRequirements{Requests: list("cpu", "4", "memory", "8Gi"), Limits: list("cpu", "4", "memory", "8Gi")},
			nil, nil, &Injector{}, corev1.PodQOSGuaranteed, list("cpu", "100m", "memory", "1Gi"), list("cpu", "100m", "memory", "1Gi"), ""},
		{"limits without requests (not defaulted) is burstable", corev1.ResourceRequirements{Limits: list("cpu", "4", "memory", "8Gi")},
			nil, nil, &Injector{}, corev1.PodQOSBurstable, list("cpu", "100m", "memory", "128Mi"), list("memory", "1Gi"), ""},
		{"burstable init container", guaranteedAgent, burstableInit, nil, &Injector{GoMaxProcs: DefaultGoMaxProcs},
			corev1.PodQOSBurstable, list("cpu", "100m", "memory", "128Mi"), list("memory", "1Gi"), "2"},
		{"pod-level resources", corev1.ResourceRequirements{}, nil, podLevel, &Injector{GoMaxProcs: DefaultGoMaxProcs},
			corev1.PodQOSGuaranteed, nil, nil, "2"},
		{"configured resources with a CPU limit", guaranteedAgent, nil, nil,
			&Injector{Resources: &corev1.ResourceRequirements{Requests: list("cpu", "250m", "memory", "256Mi"), Limits: list("cpu", "500m", "memory", "512Mi")}, GoMaxProcs: 4},
			corev1.PodQOSGuaranteed, list("cpu", "500m", "memory", "512Mi"), list("cpu", "500m", "memory", "512Mi"), "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil, "agent")
			pod.Spec.Containers[0].Resources = tt.agent
			pod.Spec.InitContainers, pod.Spec.Resources = tt.init, tt.podLevel
			before := qos.ComputePodQOS(pod)
			if ok, err := tt.injector.Mutate(pod, nil); !ok || err != nil {
				t.Fatalf("Mutate = %v, %v", ok, err)
			}
			sc := pod.Spec.InitContainers[0]
			if !equalList(sc.Resources.Requests, tt.wantReq) || !equalList(sc.Resources.Limits, tt.wantLimits) {
				t.Errorf("sidecar resources %v / %v, want %v / %v", sc.Resources.Requests, sc.Resources.Limits, tt.wantReq, tt.wantLimits)
			}
			if got := qos.ComputePodQOS(pod); got != tt.wantQoS {
				t.Errorf("pod QoS %s after injection (before: %s), want %s", got, before, tt.wantQoS)
			}
			gomax := ""
			for _, e := range sc.Env {
				if e.Name == "GOMAXPROCS" {
					gomax = e.Value
				}
			}
			if gomax != tt.wantGoMax {
				t.Errorf("GOMAXPROCS %q, want %q", gomax, tt.wantGoMax)
			}
		})
	}
}

func equalList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}
