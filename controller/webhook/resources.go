package webhook

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubectl/pkg/util/qos"
)

// DefaultGoMaxProcs is the GOMAXPROCS of injected sidecars. Without a CPU limit Go runs one P per
// node CPU (224 on a DGX H100), for a process that serves one pod's agents over loopback. Two
// keep a request and the background work (near-cache invalidations, batched TTL refreshes) from
// waiting on each other; on the 2-vCPU dev VM, 1 and 2 were within noise of each other for the
// binary (docs/sidecar.md).
const DefaultGoMaxProcs = 2

// DefaultSidecarResources are the injected sidecar's requests and limits: a small CPU request and
// no CPU limit (no throttling on the request path), memory for the default near cache (64 MiB),
// embedding cache (64 MiB) and vector shard (256 MiB) budgets with room to spare.
func DefaultSidecarResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("1Gi"),
		},
	}
}

// sidecarResources returns the sidecar's resources for pod (before injection) from base:
//   - a Guaranteed pod (kubectl's ComputePodQOS, the kubelet's rule) stays Guaranteed: the
//     sidecar's requests and limits are both the larger of base's request and limit, for CPU and
//     memory. A Burstable sidecar would demote the pod, and with it the exclusive CPUs that the
//     static CPU manager gives inference containers;
//   - a pod with pod-level resources (spec.resources) gets no container resources for the
//     sidecar: it shares the pod's budget, and the pod's QoS class comes from that budget;
//   - any other pod gets base as is.
func sidecarResources(pod *corev1.Pod, base corev1.ResourceRequirements) corev1.ResourceRequirements {
	if pod.Spec.Resources != nil {
		return corev1.ResourceRequirements{}
	}
	out := *base.DeepCopy()
	if qos.ComputePodQOS(pod) != corev1.PodQOSGuaranteed {
		return out
	}
	out.Requests, out.Limits = corev1.ResourceList{}, corev1.ResourceList{}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q := base.Requests[name]
		if l, ok := base.Limits[name]; ok && l.Cmp(q) > 0 {
			q = l
		}
		if q.IsZero() {
			continue
		}
		out.Requests[name], out.Limits[name] = q, q
	}
	return out
}

// goMaxProcsEnv is the GOMAXPROCS variable for n > 0, nil otherwise (Go's own default).
func goMaxProcsEnv(n int) []corev1.EnvVar {
	if n <= 0 {
		return nil
	}
	return []corev1.EnvVar{{Name: "GOMAXPROCS", Value: strconv.Itoa(n)}}
}
