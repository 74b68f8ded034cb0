package agent

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

func hexN(n int) string { return strings.Repeat(fmt.Sprintf("%x", n%16), 64) }

func pod(name string, labels, ann map[string]string, phase corev1.PodPhase, hostPaths ...string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels, Annotations: ann}, Status: corev1.PodStatus{Phase: phase}}
	for i, hp := range hostPaths {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: fmt.Sprint("v", i), VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hp}}})
	}
	return p
}

func TestPins(t *testing.T) {
	models := map[string]*v1alpha1.Model{
		"ns/llama":   {Spec: v1alpha1.ModelSpec{Digest: "sha256:" + hexN(1)}},
		"ns/mistral": {Spec: v1alpha1.ModelSpec{Digest: "sha256:" + hexN(2)}},
		"other/x":    {Spec: v1alpha1.ModelSpec{Digest: "sha256:" + hexN(3)}},
		"ns/bad":     {Spec: v1alpha1.ModelSpec{Digest: "md5:abc"}},
	}
	classes := map[string]*v1alpha1.AgentClass{
		"ns/chat":   {Spec: v1alpha1.AgentClassSpec{ModelRef: &v1alpha1.LocalObjectReference{Name: "llama"}}},
		"ns/nomdl":  {},
		"ns/broken": {Spec: v1alpha1.AgentClassSpec{ModelRef: &v1alpha1.LocalObjectReference{Name: "missing"}}},
	}
	const dir = "/var/lib/neuronetes/models"
	tests := []struct {
		name string
		pods []corev1.Pod
		want map[string][]string
	}{
		{"hostPath entry file", []corev1.Pod{pod("a", nil, nil, corev1.PodRunning, dir+"/sha256/"+hexN(5))}, map[string][]string{hexN(5): {"ns/a"}}},
		{"hostPath outside cache", []corev1.Pod{pod("a", nil, nil, corev1.PodRunning, "/data/sha256/"+hexN(5), dir+"/tmp")}, map[string][]string{}},
		{"hostPath cache root pins nothing", []corev1.Pod{pod("a", nil, nil, corev1.PodRunning, dir)}, map[string][]string{}},
		{"agentclass model", []corev1.Pod{pod("a", map[string]string{v1alpha1.AgentClassLabel: "chat"}, nil, corev1.PodRunning)}, map[string][]string{hexN(1): {"ns/a"}}},
		{"annotation wins over class", []corev1.Pod{pod("a", map[string]string{v1alpha1.AgentClassLabel: "chat"}, map[string]string{PodModelAnnotation: "mistral"}, corev1.PodPending)}, map[string][]string{hexN(2): {"ns/a"}}},
		{"class without model, missing model, bad digest", []corev1.Pod{
			pod("a", map[string]string{v1alpha1.AgentClassLabel: "nomdl"}, nil, corev1.PodRunning),
			pod("b", map[string]string{v1alpha1.AgentClassLabel: "broken"}, nil, corev1.PodRunning),
			pod("c", nil, map[string]string{PodModelAnnotation: "bad"}, corev1.PodRunning),
			pod("d", nil, map[string]string{PodModelAnnotation: "x"}, corev1.PodRunning), // other namespace
		}, map[string][]string{}},
		{"finished pods pin nothing", []corev1.Pod{
			pod("a", nil, map[string]string{PodModelAnnotation: "llama"}, corev1.PodSucceeded),
			pod("b", nil, nil, corev1.PodFailed, dir+"/sha256/"+hexN(1)),
		}, map[string][]string{}},
		{"two pods one entry, deduplicated", []corev1.Pod{
			pod("b", nil, map[string]string{PodModelAnnotation: "llama"}, corev1.PodRunning, dir+"/sha256/"+hexN(1)),
			pod("a", map[string]string{v1alpha1.AgentClassLabel: "chat"}, nil, corev1.PodRunning),
		}, map[string][]string{hexN(1): {"ns/a", "ns/b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Pins(tt.pods, classes, models, dir)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Pins = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLabelPatch(t *testing.T) {
	l1 := v1alpha1.WarmNodeLabel("sha256:" + hexN(1))
	l2 := v1alpha1.WarmNodeLabel("sha256:" + hexN(2))
	tr := "true"
	tests := []struct {
		name    string
		current map[string]string
		warm    []string
		known   []string
		want    map[string]*string
	}{
		{"nothing to do", map[string]string{"kubernetes.io/hostname": "n"}, nil, nil, nil},
		{"add", map[string]string{}, []string{hexN(1)}, nil, map[string]*string{l1: &tr}},
		{"already set", map[string]string{l1: "true"}, []string{hexN(1)}, nil, nil},
		{"wrong value fixed", map[string]string{l1: "false"}, []string{hexN(1)}, nil, map[string]*string{l1: &tr}},
		{"remove evicted, keep foreign", map[string]string{l1: "true", l2: "true", "warm.neuronetes.io/other": "x"}, []string{hexN(2)}, []string{hexN(1), hexN(2)}, map[string]*string{l1: nil}},
		{"unknown digest left alone", map[string]string{l1: "true"}, nil, []string{hexN(2)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LabelPatch(tt.current, tt.warm, tt.known); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("LabelPatch = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWeightsVolumeIsPinned(t *testing.T) {
	m := &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Name: "llama"}, Spec: v1alpha1.ModelSpec{Digest: "sha256:" + hexN(7), Format: "gguf", MountPath: "/weights"}}
	v, vm, err := WeightsVolume(DefaultCacheDir, m, "w")
	if err != nil {
		t.Fatal(err)
	}
	if vm.MountPath != "/weights" || !vm.ReadOnly {
		t.Fatalf("mount %+v, want read-only /weights", vm)
	}
	if want := DefaultCacheDir + "/ready/" + hexN(7); v.HostPath.Path != want || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
		t.Fatalf("volume %+v, want hostPath %s DirectoryOrCreate", v.HostPath, want)
	}
	c := WeightsWaitContainer("img", m, vm)
	if got := c.Command[len(c.Command)-1]; got != "/weights/model.gguf" {
		t.Fatalf("wait container waits for %s, want /weights/model.gguf", got)
	}
	if sc := c.SecurityContext; !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Drop) != 1 {
		t.Fatalf("wait container security context %+v is not restricted", sc)
	}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{v}}}
	if got := Pins([]corev1.Pod{p}, nil, nil, DefaultCacheDir); !reflect.DeepEqual(got, map[string][]string{hexN(7): {"ns/a"}}) {
		t.Fatalf("a pod with WeightsVolume pins %v, want the model's entry", got)
	}
	if _, _, err := WeightsVolume(DefaultCacheDir, &v1alpha1.Model{Spec: v1alpha1.ModelSpec{Digest: "bad"}}, "w"); err == nil {
		t.Fatal("bad digest accepted")
	}
}
