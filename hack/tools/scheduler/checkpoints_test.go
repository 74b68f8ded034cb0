package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynfake "k8s.io/client-go/dynamic/fake"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/scheduler/scoring"
)

func unstructuredCheckpoint(t *testing.T, ns, name, agent, node string) *unstructured.Unstructured {
	t.Helper()
	ac := &nnv1.AgentCheckpoint{
		TypeMeta:   metav1.TypeMeta{APIVersion: nnv1.GroupVersion.String(), Kind: "AgentCheckpoint"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       nnv1.AgentCheckpointSpec{Operation: nnv1.CheckpointOperation, Agent: agent},
		Status: nnv1.AgentCheckpointStatus{Phase: nnv1.AgentCheckpointSucceeded, NodeName: node,
			CheckpointID: ns + "." + name},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ac)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestCheckpointLister: NeuroNetesModelCache's AgentCheckpoint informer hands ModelCache typed
// AgentCheckpoints of the asked namespace, and the node holding the pod's checkpoint then scores
// above a node of the same warmth without it.
func TestCheckpointLister(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dc := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{agentCheckpoints: "AgentCheckpointList"},
		unstructuredCheckpoint(t, "a", "c1", "agent", "n1"), unstructuredCheckpoint(t, "b", "c2", "agent", "n2"))
	f := dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	list, err := checkpointLister(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	f.WaitForCacheSync(ctx.Done())
	var got []nnv1.AgentCheckpoint
	for deadline := time.Now().Add(5 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = list("a")
	}
	if len(got) != 1 || got[0].Name != "c1" || got[0].Status.NodeName != "n1" {
		t.Fatalf("list(a) = %+v, want c1 on n1", got)
	}
	m := scoring.ModelCache{Checkpoints: list}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p",
		Annotations: map[string]string{nnv1.RestoreFromAnnotation: "agent"}}}
	here := m.Score(ctx, pod, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	there := m.Score(ctx, pod, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
	if here <= there {
		t.Errorf("Score on the checkpoint's node %d, elsewhere %d: want higher on the checkpoint's node", here, there)
	}
}
