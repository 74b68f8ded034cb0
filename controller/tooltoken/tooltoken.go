// Package tooltoken mounts the tool proxy's credential, a projected ServiceAccount token, in
// the pods the controller makes (AgentPool and AgentSession pods).
package tooltoken

import (
	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Add mounts a projected ServiceAccount token of audience nnv1.ToolProxyAudience at
// nnv1.ToolTokenDir in every container of the pod's template and names its file in
// $NEURONETES_TOOL_TOKEN_FILE: the pod's credential for the dispatcher's tool proxy, bound by
// the apiserver to this pod's name and UID. A template that already has a volume of that name,
// or a container that already mounts that directory or sets that variable, keeps its own.
// Injected sidecars are added later by the webhook and get no mount.
func Add(pod *corev1.Pod) {
	for _, v := range pod.Spec.Volumes {
		if v.Name == nnv1.ToolTokenVolume {
			return
		}
	}
	exp := int64(nnv1.ToolTokenExpirationSeconds)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: nnv1.ToolTokenVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: nnv1.ToolProxyAudience, ExpirationSeconds: &exp, Path: "token"},
		}}},
	}})
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.MountPath == nnv1.ToolTokenDir
		}
		if !mounted {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: nnv1.ToolTokenVolume, MountPath: nnv1.ToolTokenDir, ReadOnly: true})
		}
		set := false
		for _, e := range c.Env {
			set = set || e.Name == nnv1.ToolTokenFileEnv
		}
		if !set {
			c.Env = append(c.Env, corev1.EnvVar{Name: nnv1.ToolTokenFileEnv, Value: nnv1.ToolTokenFile})
		}
	}
}
