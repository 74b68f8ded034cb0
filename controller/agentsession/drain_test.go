package agentsession

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestAvoidNode(t *testing.T) {
	notN1 := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1"}}
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	gpu := corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpExists}
	for _, tc := range []struct {
		name  string
		terms []corev1.NodeSelectorTerm
		want  []corev1.NodeSelectorTerm
	}{
		{"no affinity", nil, []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{notN1}}}},
		{"every ORed term excludes the node", []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}, {MatchExpressions: []corev1.NodeSelectorRequirement{gpu}}},
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone}, MatchFields: []corev1.NodeSelectorRequirement{notN1}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{gpu}, MatchFields: []corev1.NodeSelectorRequirement{notN1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{}
			if tc.terms != nil {
				pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: tc.terms}}}
			}
			AvoidNode(pod, "n1")
			if got := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("terms %+v, want %+v", got, tc.want)
			}
		})
	}
	pod := &corev1.Pod{}
	if AvoidNode(pod, ""); pod.Spec.Affinity != nil {
		t.Fatalf("no node: affinity %+v", pod.Spec.Affinity)
	}
}

// TestReconcileDrainResumesElsewhere: a running session (no idle timeout) whose node is cordoned,
// or gets an interruption taint (the pools' list, plus the admin's key), is checkpointed, its pod
// deleted, and it resumes at once (no activity) into a new pod that must avoid the node; once
// running there, status.drainedNode is cleared.
func TestReconcileDrainResumesElsewhere(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain func(*corev1.Node)
	}{
		{"cordon", func(n *corev1.Node) { n.Spec.Unschedulable = true }},
		{"karpenter taint", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}
		}},
		{"admin's taint", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "example.com/reclaim", Effect: corev1.TaintEffectNoExecute}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			h := newHarness(t, testClass(nil), testSession(nil, ""), node)
			h.r.InterruptionTaints = []string{"example.com/reclaim"}
			h.step(nnv1.SessionPending)
			h.ready("s1-1")
			h.step(nnv1.SessionRunning)
			h.step(nnv1.SessionRunning) // a healthy node: nothing to do
			if reqs := h.r.sessionsOnDrainingNode(context.Background(), node); len(reqs) != 0 {
				t.Fatalf("a healthy node enqueues %v", reqs)
			}
			tc.drain(node)
			if err := h.c.Update(context.Background(), node); err != nil {
				t.Fatal(err)
			}
			other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{Unschedulable: true}}
			if reqs := h.r.sessionsOnDrainingNode(context.Background(), other); len(reqs) != 0 {
				t.Fatalf("another draining node enqueues %v", reqs)
			}
			want := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "a", Name: "s1"}}}
			if reqs := h.r.sessionsOnDrainingNode(context.Background(), node); !reflect.DeepEqual(reqs, want) {
				t.Fatalf("the draining node enqueues %v, want %v", reqs, want)
			}
			s := h.step(nnv1.SessionSuspending)
			if s.Status.DrainedNode != "n1" || s.Status.SuspendedByRequest {
				t.Fatalf("suspending status %+v, want drainedNode n1", s.Status)
			}
			h.finish("s1-1-suspend", nnv1.AgentCheckpointSucceeded)
			s = h.step(nnv1.SessionSuspended)
			if h.podExists("s1-1") || s.Status.DrainedNode != "n1" {
				t.Fatalf("suspended: pod s1-1 exists %v, status %+v", h.podExists("s1-1"), s.Status)
			}
			h.now = h.now.Add(time.Millisecond)
			s = h.step(nnv1.SessionResuming)
			var p corev1.Pod
			if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-2"}, &p); err != nil {
				t.Fatal(err)
			}
			terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Values[0] != "n1" || p.Spec.Containers[0].Image != "pause:test" {
				t.Fatalf("resume pod affinity %+v image %s, want a host pod avoiding n1", terms, p.Spec.Containers[0].Image)
			}
			h.ready("s1-2") // the harness's kubelet says n1; only the status matters below
			h.step(nnv1.SessionResuming)
			h.finish("s1-2-resume", nnv1.AgentCheckpointSucceeded)
			s = h.step(nnv1.SessionRunning)
			if s.Status.DrainedNode != "" || s.Status.PodName != "s1-2" {
				t.Fatalf("resumed status %+v, want pod s1-2 and no drainedNode", s.Status)
			}
		})
	}
}

// TestReconcileEvictionOnDrainingNode: kubectl drain cordons the node and evicts the pod; the
// pod, terminating but still running in its preStop hold, is checkpointed (not lost), and the
// session resumes at once avoiding the node. A pod deleted on a healthy node is lost as before.
func TestReconcileEvictionOnDrainingNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cordon  bool
		stale   bool // the cache has not seen the cordon yet; the API server has
		want    nnv1.AgentSessionPhase
		drained string
	}{
		{"drained node", true, false, nnv1.SessionSuspending, "n1"},
		{"drained node, cache behind", true, true, nnv1.SessionSuspending, "n1"},
		{"healthy node", false, false, nnv1.SessionPending, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			h := newHarness(t, testClass(nil), testSession(nil, ""), node)
			h.step(nnv1.SessionPending)
			h.ready("s1-1")
			h.step(nnv1.SessionRunning)
			node.Spec.Unschedulable = tc.cordon
			if tc.stale {
				// The API server has the cordoned node; the cache (h.c) does not yet.
				h.r.APIReader = nodeAhead{Client: h.c, node: node.DeepCopy()}
			} else if err := h.c.Update(context.Background(), node); err != nil {
				t.Fatal(err)
			}
			var p corev1.Pod
			if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-1"}, &p); err != nil {
				t.Fatal(err)
			}
			// A finalizer keeps the deleted pod visible with its deletionTimestamp, as the
			// kubelet's graceful termination does.
			p.Finalizers = []string{"test/hold"}
			if err := h.c.Update(context.Background(), &p); err != nil {
				t.Fatal(err)
			}
			if err := h.c.Delete(context.Background(), &p); err != nil {
				t.Fatal(err)
			}
			s := h.step(tc.want)
			if s.Status.DrainedNode != tc.drained {
				t.Fatalf("drainedNode %q, want %q", s.Status.DrainedNode, tc.drained)
			}
			if !tc.cordon {
				return
			}
			var ck nnv1.AgentCheckpoint
			if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-1-suspend"}, &ck); err != nil || ck.Spec.Source.Pod != "s1-1" {
				t.Fatalf("checkpoint of the evicted pod: %v %+v", err, ck.Spec)
			}
			h.step(nnv1.SessionSuspending)
			h.finish("s1-1-suspend", nnv1.AgentCheckpointSucceeded)
			h.step(nnv1.SessionSuspended)
			h.now = h.now.Add(time.Millisecond)
			if s = h.step(nnv1.SessionResuming); s.Status.PodName != "s1-2" {
				t.Fatalf("resume pod %q, want s1-2", s.Status.PodName)
			}
		})
	}
}

// nodeAhead reads as the API server would while the cache lags behind a node's update: that
// node as given, everything else as the cache has it.
type nodeAhead struct {
	client.Client
	node *corev1.Node
}

func (n nodeAhead) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if out, ok := obj.(*corev1.Node); ok && key.Name == n.node.Name {
		n.node.DeepCopyInto(out)
		return nil
	}
	return n.Client.Get(ctx, key, obj, opts...)
}
