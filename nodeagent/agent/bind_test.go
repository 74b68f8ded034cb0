package agent

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestBindTriggers(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	model := func(name string, n int) *v1alpha1.Model {
		return &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1alpha1.ModelSpec{Digest: "sha256:" + hexN(n)}}
	}
	models := map[string]*v1alpha1.Model{"ns/cold": model("cold", 1), "ns/cold2": model("cold2", 2), "ns/warm": model("warm", 3),
		"ns/failed": model("failed", 4), "ns/bad": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bad"}, Spec: v1alpha1.ModelSpec{Digest: "md5:x"}}}
	classes := map[string]*v1alpha1.AgentClass{"ns/chat": {Spec: v1alpha1.AgentClassSpec{ModelRef: &v1alpha1.LocalObjectReference{Name: "cold2"}}}}
	states := map[string]State{hexN(3): {Phase: PhaseReady, Warm: true}, hexN(4): {Phase: PhaseFailed}, hexN(2): {Phase: PhaseDownloading}}
	pod := func(name string, age time.Duration, model string, mut ...func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(t0.Add(-age))},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
		if model != "" {
			p.Annotations = map[string]string{PodModelAnnotation: model}
		}
		for _, f := range mut {
			f(&p)
		}
		return p
	}
	byClass := func(p *corev1.Pod) { p.Labels = map[string]string{v1alpha1.AgentClassLabel: "chat"} }
	finished := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	deleting := func(p *corev1.Pod) { now := metav1.NewTime(t0); p.DeletionTimestamp = &now }
	type want struct {
		hex  string
		pods []string
	}
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		handled []types.UID
		want    []want
		decided []string
	}{
		{name: "a pod bound with cold weights triggers its fetch",
			pods: []corev1.Pod{pod("a", 0, "cold")}, want: []want{{hexN(1), []string{"a"}}}, decided: []string{"a"}},
		{name: "warm weights trigger nothing but the pod is decided",
			pods: []corev1.Pod{pod("a", 0, "warm")}, decided: []string{"a"}},
		{name: "a pod decided before does not trigger again (no duplicate fetch)",
			pods: []corev1.Pod{pod("a", 0, "cold")}, handled: []types.UID{"a"}},
		{name: "pods of one Model share one fetch, oldest first",
			pods: []corev1.Pod{pod("b", 1*time.Second, "cold"), pod("a", 2*time.Second, "cold")}, want: []want{{hexN(1), []string{"a", "b"}}}, decided: []string{"a", "b"}},
		{name: "priority: the Model of the oldest pod first; the class's modelRef counts; a download in progress is joined",
			pods: []corev1.Pod{pod("new", 1*time.Second, "cold"), pod("old", 5*time.Second, "", byClass)},
			want: []want{{hexN(2), []string{"old"}}, {hexN(1), []string{"new"}}}, decided: []string{"old", "new"}},
		{name: "a failed Model is retried for a new bind, whatever its backoff",
			pods: []corev1.Pod{pod("a", 0, "failed")}, want: []want{{hexN(4), []string{"a"}}}, decided: []string{"a"}},
		{name: "finished and deleting pods trigger nothing",
			pods: []corev1.Pod{pod("done", 0, "cold", finished), pod("gone", 0, "cold", deleting)}},
		{name: "a pod of no Model, of an absent Model or of a bad digest is left for later",
			pods: []corev1.Pod{pod("plain", 0, ""), pod("absent", 0, "nope"), pod("bad", 0, "bad")}},
		{name: "a running pod (the node agent restarted) is decided without a trigger",
			pods: []corev1.Pod{pod("r", 0, "cold", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })}, decided: []string{"r"}},
		{name: "an unbound pod triggers nothing",
			pods: []corev1.Pod{pod("u", 0, "cold", func(p *corev1.Pod) { p.Spec.NodeName = "" })}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handled := map[types.UID]bool{}
			for _, u := range tc.handled {
				handled[u] = true
			}
			got, decided := BindTriggers(tc.pods, handled,
				func(p *corev1.Pod) *v1alpha1.Model { return PodModel(p, classes, models) },
				func(h string) State { return states[h] })
			var gotW []want
			for _, g := range got {
				w := want{hex: g.Hex}
				for _, p := range g.Pods {
					w.pods = append(w.pods, p.Name)
				}
				gotW = append(gotW, w)
			}
			if !reflect.DeepEqual(gotW, tc.want) {
				t.Errorf("triggers %v, want %v", gotW, tc.want)
			}
			var gotD []string
			for _, u := range decided {
				gotD = append(gotD, string(u))
			}
			if !reflect.DeepEqual(gotD, tc.decided) {
				t.Errorf("decided %v, want %v", gotD, tc.decided)
			}
		})
	}
}
