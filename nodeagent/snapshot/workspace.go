package snapshot

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ReasonWorkspaceTooLarge is the Warning event reason, and the prefix of status.message, of a
// Checkpoint whose workspace volume holds more than its sizeLimit: nothing was dumped and the
// container keeps running.
const ReasonWorkspaceTooLarge = "WorkspaceTooLarge"

// Workspace is the emptyDir volume a Checkpoint carries (spec.workspaceVolume).
type Workspace struct {
	// Volume is the pod's volume name, Path its mount path in the container.
	Volume, Path string
	// Limit is the emptyDir's sizeLimit in bytes.
	Limit int64
}

// workspaceOf resolves spec.workspaceVolume on the source pod: an emptyDir volume with a
// sizeLimit, mounted by the container. The error names the field.
func workspaceOf(pod *corev1.Pod, container, volume string) (*Workspace, error) {
	var ed *corev1.EmptyDirVolumeSource
	for _, v := range pod.Spec.Volumes {
		if v.Name == volume {
			ed = v.EmptyDir
			if ed == nil {
				return nil, fmt.Errorf("spec.workspaceVolume: volume %q of pod %s is not an emptyDir", volume, pod.Name)
			}
		}
	}
	if ed == nil {
		return nil, fmt.Errorf("spec.workspaceVolume: pod %s has no volume %q", pod.Name, volume)
	}
	if ed.SizeLimit == nil || ed.SizeLimit.Value() <= 0 {
		return nil, fmt.Errorf("spec.workspaceVolume: emptyDir volume %q of pod %s has no sizeLimit (a workspace is carried only with one)", volume, pod.Name)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == volume && m.SubPath == "" && m.SubPathExpr == "" {
				return &Workspace{Volume: volume, Path: m.MountPath, Limit: ed.SizeLimit.Value()}, nil
			}
		}
	}
	return nil, fmt.Errorf("spec.workspaceVolume: container %s of pod %s does not mount volume %q (whole, without subPath)", container, pod.Name, volume)
}
