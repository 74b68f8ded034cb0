package agent

import (
	"fmt"
	"path"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

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
// m at <mountPath>/<WeightsFileName(format)>. The hostPath is the content-addressed entry under
// cacheDir, so the node agent sees the pod as using (pinning) that entry. The pod should be placed on
// a node labelled WarmNodeLabel(digest); hostPath type File makes it fail fast elsewhere.
func WeightsVolume(cacheDir string, m *v1alpha1.Model, volumeName string) (corev1.Volume, corev1.VolumeMount, error) {
	h, err := cache.ParseDigest(m.Spec.Digest)
	if err != nil {
		return corev1.Volume{}, corev1.VolumeMount{}, fmt.Errorf("model %s spec.digest: %w", m.Name, err)
	}
	mountPath := m.Spec.MountPath
	if mountPath == "" {
		mountPath = "/models"
	}
	t := corev1.HostPathFile
	v := corev1.Volume{Name: volumeName, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: filepath.Join(cacheDir, "sha256", h), Type: &t,
	}}}
	vm := corev1.VolumeMount{Name: volumeName, MountPath: path.Join(mountPath, WeightsFileName(m.Spec.Format)), ReadOnly: true}
	return v, vm, nil
}
