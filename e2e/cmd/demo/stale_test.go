package main

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStaleImagePods(t *testing.T) {
	pod := func(name string, st ...corev1.ContainerStatus) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{ContainerStatuses: st}}
	}
	agent := func(id string) corev1.ContainerStatus { return corev1.ContainerStatus{Name: "agent", ImageID: id} }
	side := corev1.ContainerStatus{Name: "sidecar", ImageID: "sha256:side"}
	pods := []corev1.Pod{
		pod("current", agent("sha256:new"), side),
		pod("old", side, agent("sha256:old")),
		pod("starting", agent("")),
		pod("no-status"),
	}
	if got := staleImagePods(pods, "agent", "sha256:new"); !slices.Equal(got, []string{"old"}) {
		t.Errorf("stale = %v, want [old]", got)
	}
	if got := staleImagePods(pods[:1], "agent", "sha256:new"); len(got) != 0 {
		t.Errorf("stale = %v, want none", got)
	}
}
