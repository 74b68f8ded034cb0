package snapshot

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// prefetchEngine is a fakeEngine that records prefetches.
type prefetchEngine struct {
	fakeEngine
	prefetches []call
}

func (p *prefetchEngine) Prefetch(_ context.Context, c Container, k store.Key, id string) {
	p.prefetches = append(p.prefetches, call{"prefetch", c.Pod, k.String(), id})
}

// TestPrefetchWhileTargetStarts: a Restore whose target pod is on this node but whose container
// does not run yet starts the fetch of its checkpoint once (not again on the next reconcile); a
// Restore of another namespace's checkpoint, of "latest", a Checkpoint and a pod of another node
// start none.
func TestPrefetchWhileTargetStarts(t *testing.T) {
	ref := &v1alpha1.ContainerRef{Pod: "p"}
	tests := []struct {
		name string
		spec v1alpha1.AgentCheckpointSpec
		node string
		want []call
	}{
		{name: "restore of an own checkpoint", spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "session.s", CheckpointID: "ns.s-1-suspend"},
			node: "node-a", want: []call{{"prefetch", "p", "ns/session.s", "ns.s-1-suspend"}}},
		{name: "another namespace's checkpoint", spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "session.s", CheckpointID: "victim.s-1-suspend"}, node: "node-a"},
		{name: "latest (resolved when it runs)", spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "session.s"}, node: "node-a"},
		{name: "checkpoint", spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Source: ref}, node: "node-a"},
		{name: "pod of another node", spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "session.s", CheckpointID: "ns.s-1-suspend"}, node: "node-b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(s)
			_ = v1alpha1.AddToScheme(s)
			ac := &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "req", UID: "u1"}, Spec: tc.spec}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(ac, pod("p", tc.node, false)).WithStatusSubresource(ac).Build()
			eng := &prefetchEngine{}
			r := &Reconciler{Client: c, Recorder: record.NewFakeRecorder(20), Engine: eng, NodeName: "node-a"}
			for range 2 {
				if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "req"}}); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(eng.prefetches, tc.want) {
				t.Errorf("prefetches %v, want %v", eng.prefetches, tc.want)
			}
			if len(eng.calls) != 0 {
				t.Errorf("engine ran %v before the container runs", eng.calls)
			}
		})
	}
}

// TestCheckpointsOfPod: a pod of this node enqueues the unfinished AgentCheckpoints naming it.
func TestCheckpointsOfPod(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	mk := func(name, pod string, op v1alpha1.AgentCheckpointOperation, phase v1alpha1.AgentCheckpointPhase) *v1alpha1.AgentCheckpoint {
		ac := &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: v1alpha1.AgentCheckpointSpec{Operation: op, Agent: "a"}, Status: v1alpha1.AgentCheckpointStatus{Phase: phase}}
		if op == v1alpha1.RestoreOperation {
			ac.Spec.Target = &v1alpha1.ContainerRef{Pod: pod}
		} else {
			ac.Spec.Source = &v1alpha1.ContainerRef{Pod: pod}
		}
		return ac
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		mk("s-2-resume", "s-2", v1alpha1.RestoreOperation, v1alpha1.AgentCheckpointPending),
		mk("s-2-suspend", "s-2", v1alpha1.CheckpointOperation, ""),
		mk("s-1-resume", "s-1", v1alpha1.RestoreOperation, ""),
		mk("old", "s-2", v1alpha1.RestoreOperation, v1alpha1.AgentCheckpointSucceeded),
	).Build()
	r := &Reconciler{Client: c, NodeName: "node-a"}
	got := r.checkpointsOfPod(context.Background(), pod("s-2", "node-a", false))
	var names []string
	for _, q := range got {
		names = append(names, q.Name)
	}
	slices.Sort(names)
	if want := []string{"s-2-resume", "s-2-suspend"}; !slices.Equal(names, want) {
		t.Errorf("enqueued %v, want %v", names, want)
	}
	if got := r.checkpointsOfPod(context.Background(), pod("s-2", "node-b", false)); len(got) != 0 {
		t.Errorf("a pod of another node enqueued %v", got)
	}
}
