package scoring

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ckpt is a Checkpoint AgentCheckpoint of agent in ns, dumped on node, completed at minute min.
func ckpt(ns, name, agent, node string, phase nnv1.AgentCheckpointPhase, min int) nnv1.AgentCheckpoint {
	t := metav1.NewTime(time.Date(2026, 12, 6, 10, min, 0, 0, time.UTC))
	return nnv1.AgentCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       nnv1.AgentCheckpointSpec{Operation: nnv1.CheckpointOperation, Agent: agent},
		Status: nnv1.AgentCheckpointStatus{Phase: phase, NodeName: node, CheckpointID: ns + "." + name,
			CompletionTime: &t},
	}
}

func restorePod(ns, from string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p",
		Annotations: map[string]string{nnv1.RestoreFromAnnotation: from}}}
}

// TestCheckpointNode: the node of the pod's checkpoint (its id, or the agent's latest Succeeded
// dump), never one of another namespace, agent, operation or an unfinished one.
func TestCheckpointNode(t *testing.T) {
	old := ckpt("a", "c1", "agent", "n1", nnv1.AgentCheckpointSucceeded, 1)
	latest := ckpt("a", "c2", "agent", "n2", nnv1.AgentCheckpointSucceeded, 5)
	running := ckpt("a", "c3", "agent", "n3", nnv1.AgentCheckpointRunning, 9)
	failed := ckpt("a", "c4", "agent", "n4", nnv1.AgentCheckpointFailed, 9)
	otherNS := ckpt("b", "c5", "agent", "n5", nnv1.AgentCheckpointSucceeded, 9)
	otherAgent := ckpt("a", "c6", "other", "n6", nnv1.AgentCheckpointSucceeded, 9)
	restore := ckpt("a", "c7", "agent", "n7", nnv1.AgentCheckpointSucceeded, 9)
	restore.Spec.Operation = nnv1.RestoreOperation
	byLabel := ckpt("a", "c8", "", "n8", nnv1.AgentCheckpointSucceeded, 7)
	byLabel.Labels = map[string]string{nnv1.CheckpointAgentLabel: "agent"}
	noNode := ckpt("a", "c9", "agent", "", nnv1.AgentCheckpointSucceeded, 9)
	all := []nnv1.AgentCheckpoint{old, latest, running, failed, otherNS, otherAgent, restore, noNode}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		cks  []nnv1.AgentCheckpoint
		want string
	}{
		{"latest", restorePod("a", "agent"), all, "n2"},
		{"latest in any order", restorePod("a", "agent"), []nnv1.AgentCheckpoint{latest, old}, "n2"},
		{"agent key from the label", restorePod("a", "agent"), append(all, byLabel), "n8"},
		{"explicit id", restorePod("a", "agent/a.c1"), all, "n1"},
		{"explicit id not succeeded", restorePod("a", "agent/a.c3"), all, ""},
		{"only other namespaces, agents, operations", restorePod("a", "agent"), []nnv1.AgentCheckpoint{otherNS, otherAgent, restore, running, noNode}, ""},
		{"no restore-from", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}}, all, ""},
		{"restore-from naming another namespace", restorePod("a", "agent/b.c5"), all, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckpointNode(tc.pod, tc.cks); got != tc.want {
				t.Errorf("CheckpointNode = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckpointScore(t *testing.T) {
	for _, tc := range []struct {
		cache       int64
		known, here bool
		want        int64
	}{
		{CacheWarm, false, false, CacheWarm},
		{CacheNeutral, false, false, CacheNeutral},
		{CacheWarm, true, true, MaxScore},
		{CacheWarm, true, false, 75},
		{CacheNeutral, true, true, 62},
		{CacheNeutral, true, false, 37},
		{CacheOther, true, true, 25},
		{CacheOther, true, false, 0},
	} {
		if got := CheckpointScore(tc.cache, tc.known, tc.here); got != tc.want {
			t.Errorf("CheckpointScore(%d, %v, %v) = %d, want %d", tc.cache, tc.known, tc.here, got, tc.want)
		}
	}
}

// TestModelCacheCheckpoint: ModelCache ranks the node holding the pod's checkpoint above the
// other nodes of the same warmth, and scores as before when no checkpoint node is known.
func TestModelCacheCheckpoint(t *testing.T) {
	cks := []nnv1.AgentCheckpoint{ckpt("a", "c1", "agent", "n1", nnv1.AgentCheckpointSucceeded, 1)}
	p := ModelCache{Checkpoints: func(ns string) []nnv1.AgentCheckpoint {
		if ns != "a" {
			return nil
		}
		return cks
	}}
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node string
		want int64
	}{
		{"checkpoint here", restorePod("a", "agent"), "n1", 62},
		{"checkpoint elsewhere", restorePod("a", "agent"), "n2", 37},
		{"unknown checkpoint", restorePod("a", "nobody"), "n1", CacheNeutral},
		{"no restore-from", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}}, "n1", CacheNeutral},
		{"other namespace", restorePod("b", "agent"), "n1", CacheNeutral},
	} {
		if got := p.Score(ctx, tc.pod, node(tc.node)); got != tc.want {
			t.Errorf("%s: Score = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := (ModelCache{}).Score(ctx, restorePod("a", "agent"), node("n1")); got != CacheNeutral {
		t.Errorf("without Checkpoints: Score = %d, want %d", got, CacheNeutral)
	}
}
