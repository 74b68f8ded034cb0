package webhook

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/nodeagent/agent"
)

// InjectWeightsWait appends to pod the init container that waits for its Model weights
// (agent.WeightsWaitDirsContainer, running image) when a container of the pod mounts a node agent
// ready directory (agent.WeightsVolume: a hostPath <cacheDir>/ready/<hex>) and the pod has no such
// container yet. On a node where the weights are cold, binding the pod starts their fetch, and the
// pod's containers start once they are ready. The init container comes last, after the sidecar and
// the pod's own init containers, which run meanwhile. It returns whether pod changed.
func InjectWeightsWait(pod *corev1.Pod, image string, pull corev1.PullPolicy) bool {
	if image == "" {
		return false
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == agent.WeightsWaitContainerName {
			return false
		}
	}
	ready := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil && agent.IsReadyDir(v.HostPath.Path) {
			ready[v.Name] = true
		}
	}
	var mounts []corev1.VolumeMount
	seen := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if ready[m.Name] && !seen[m.Name] && m.SubPath == "" && m.SubPathExpr == "" {
				seen[m.Name] = true
				mounts = append(mounts, m)
			}
		}
	}
	if len(mounts) == 0 {
		return false
	}
	w := agent.WeightsWaitDirsContainer(image, mounts)
	if pull != "" {
		w.ImagePullPolicy = pull
	}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, w)
	return true
}
