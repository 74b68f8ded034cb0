package agent

import (
	"fmt"
	"path"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
)

// DefaultCacheDir is the node agent's default cache directory on the host.
const DefaultCacheDir = "/var/lib/neuronetes/models"

// WeightsFileName is the file name under a Model's mountPath at which agent pods see the weights:
// "model.<format>" ("model.bin" for raw or unset formats).
func WeightsFileName(format string) string {
	switch format {
	case "", "raw":
		return "model.bin"
	case "pytorch":
		return "model.pt"
	case "tensorrt":
		return "model.engine"
	default:
		return "model." + format
	}
}

// WeightsVolume returns the read-only hostPath volume and mount that give a pod the cached weights of
// m at <mountPath>/<WeightsFileName(format)>. The hostPath is the entry's ready directory
// <cacheDir>/ready/<hex> (type DirectoryOrCreate, so the kubelet mounts it on a cold node too): the
// node agent links the verified, warm entry into it under that file name, and sees the pod as using
// (pinning) the entry. On a node where the weights are cold the file appears once they are ready;
// WeightsWaitContainer makes the pod's containers start only then.
func WeightsVolume(cacheDir string, m *v1alpha1.Model, volumeName string) (corev1.Volume, corev1.VolumeMount, error) {
	h, err := cache.ParseDigest(m.Spec.Digest)
	if err != nil {
		return corev1.Volume{}, corev1.VolumeMount{}, fmt.Errorf("model %s spec.digest: %w", m.Name, err)
	}
	t := corev1.HostPathDirectoryOrCreate
	v := corev1.Volume{Name: volumeName, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: filepath.Join(cacheDir, "ready", h), Type: &t,
	}}}
	vm := corev1.VolumeMount{Name: volumeName, MountPath: ModelMountPath(m), ReadOnly: true}
	return v, vm, nil
}

// ModelMountPath is m's spec.mountPath, "/models" when unset.
func ModelMountPath(m *v1alpha1.Model) string {
	if m.Spec.MountPath == "" {
		return "/models"
	}
	return m.Spec.MountPath
}

// WeightsWaitContainerName is the init container WeightsWaitContainer returns.
const WeightsWaitContainerName = "neuronetes-weights"

// WeightsWaitContainer returns an init container that waits until the weights of m appear in the
// WeightsVolume mount, so that the pod's containers start only once the node agent has fetched,
// verified and warmed them (on a cold node, binding the pod starts that fetch). image holds the
// nodeagent binary at /nodeagent (its wait-weights subcommand). The container needs no access to
// the node agent (no socket, no API): it only watches its own read-only mount, and meets Pod
// Security restricted's container rules (non-root, no capabilities, no privilege escalation,
// read-only root filesystem, RuntimeDefault seccomp).
func WeightsWaitContainer(image string, m *v1alpha1.Model, mount corev1.VolumeMount) corev1.Container {
	c := weightsWait(image, []corev1.VolumeMount{mount})
	c.Command = []string{"/nodeagent", "wait-weights", path.Join(mount.MountPath, WeightsFileName(m.Spec.Format))}
	return c
}

// WeightsWaitDirsContainer is WeightsWaitContainer for ready-directory mounts whose Model is not at
// hand (the sidecar webhook): it waits until each mount holds a file (the node agent links only a
// Ready entry there).
func WeightsWaitDirsContainer(image string, mounts []corev1.VolumeMount) corev1.Container {
	c := weightsWait(image, mounts)
	c.Command = []string{"/nodeagent", "wait-weights", "-dir"}
	for _, m := range mounts {
		c.Command = append(c.Command, m.MountPath)
	}
	return c
}

// IsReadyDir reports whether hostPath is an entry's ready directory (<cacheDir>/ready/<hex>, as
// WeightsVolume makes it), whatever the cache directory.
func IsReadyDir(hostPath string) bool {
	p := filepath.Clean(hostPath)
	if filepath.Base(filepath.Dir(p)) != "ready" {
		return false
	}
	_, err := cache.ParseDigest(cache.DigestPrefix + filepath.Base(p))
	return err == nil
}

func weightsWait(image string, mounts []corev1.VolumeMount) corev1.Container {
	ro := make([]corev1.VolumeMount, len(mounts))
	for i, m := range mounts {
		ro[i] = corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: true}
	}
	return corev1.Container{
		Name:            WeightsWaitContainerName,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		VolumeMounts:    ro,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
		},
	}
}
